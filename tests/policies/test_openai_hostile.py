"""A server's tool call with hostile arguments is the model's mistake: an invalid action."""

from __future__ import annotations

import pytest
from aiohttp import web

import agentgym
from agentgym.rollout import LMAgent, RolloutConfig, run_episode

from .test_openai import HI, client, one_route, serving


@pytest.mark.parametrize("arguments", ['{"a": ' * 100_000 + "1" + "}" * 100_000,
                                       '{"a": ' + "7" * 5000 + "}"],
                         ids=["nested-100000-deep", "5000-digit-number"])
async def test_hostile_arguments_become_an_invalid_action(arguments):
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "calculator", "arguments": arguments}}]}}]})

    async with serving(one_route(handler)) as url:
        policy = client(url)
        try:
            (got,) = await policy.generate([HI])  # no exception: the text carries the call
            assert got.tool_calls == () and "calculator" in got.text
            env = agentgym.make("agentgym/Arithmetic-v0")
            traj = await run_episode(env, LMAgent(policy), seed=0, group_id="g",
                                     config=RolloutConfig(max_steps=1))
            await env.aclose()
        finally:
            await policy.aclose()
    assert traj.status != "error", traj.error  # not an infrastructure fault
    assert traj.steps and not traj.steps[0].valid
