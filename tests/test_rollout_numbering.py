"""Seeded rollouts sample the same whatever order their envs come up in."""

import asyncio

from agentgym import BaseEnv, Message, StepResult
from agentgym.engines.versioned import VersionedAgent
from agentgym.policies.base import Completion, SamplingParams
from agentgym.rollout import LMAgent, RolloutConfig, run_groups


class _SlowReset(BaseEnv):
    """An env whose reset takes ``delay`` seconds (a sandbox that takes its time to start)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def _reset(self, seed, options):
        await asyncio.sleep(self.delay)
        return [Message("user", f"task {seed}")], {}

    async def _step(self, action):
        return StepResult((Message("user", "done"),), 0.0, terminated=True)


class _SeedEcho:
    """A backend that answers each request with the sampling seed it was given."""

    tokenizer = None

    async def generate(self, requests):
        return [Completion(f"seed {r.params.seed}") for r in requests]

    async def aclose(self):
        pass


async def _sampled(delays, wrap=lambda agent: agent, concurrency=64):
    made = iter(delays)
    agent = LMAgent(_SeedEcho(), sampling=SamplingParams(temperature=1.0, seed=7))
    trajs = await run_groups(lambda: _SlowReset(next(made)), wrap(agent), [0, 1],
                             RolloutConfig(group_size=2, concurrency=concurrency))
    return [t.steps[0].action.content for t in trajs], agent


async def test_sampling_seeds_follow_the_episode_not_the_order_its_env_came_up():
    in_order, agent = await _sampled([0.0, 0.01, 0.02, 0.03])
    reversed_, _ = await _sampled([0.03, 0.02, 0.01, 0.0])
    assert in_order == reversed_
    assert len(set(in_order)) == 4  # every rollout its own draw
    assert agent.episodes_started == 4
    wrapped, _ = await _sampled([0.03, 0.02, 0.01, 0.0], VersionedAgent)
    assert wrapped == in_order
    one_at_a_time, _ = await _sampled([0.03, 0.0, 0.02, 0.01], concurrency=1)
    assert one_at_a_time == in_order


async def test_a_reused_agent_draws_anew():
    agent = LMAgent(_SeedEcho(), sampling=SamplingParams(temperature=1.0, seed=7))
    first = await run_groups(lambda: _SlowReset(0.0), agent, [0], RolloutConfig(group_size=2))
    again = await run_groups(lambda: _SlowReset(0.0), agent, [0], RolloutConfig(group_size=2))
    assert {t.steps[0].action.content for t in first}.isdisjoint(
        t.steps[0].action.content for t in again)
