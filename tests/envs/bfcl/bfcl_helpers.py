"""Shared helpers of the BFCL tests."""

import asyncio

import agentgym
from agentgym.envs.bfcl import MULTI_TURN


def env_id(category):
    return "bfcl/MultiTurn-v0" if category in MULTI_TURN else "bfcl/SingleTurn-v0"


def make(category, **kwargs):
    return agentgym.make(env_id(category), category=category, **kwargs)


async def play_expert(env, task_id):
    """Replay BFCL's ground truth through the env; the last StepResult and the step count."""
    await env.reset(options={"task_id": task_id})
    steps = 0
    while True:
        result = await env.step(env.expert_action())
        steps += 1
        if result.done:
            return result, steps


def run(coro):
    return asyncio.run(coro)
