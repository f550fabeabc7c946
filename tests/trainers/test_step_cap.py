"""The rollout engine's step cap is a training setting (rollout.max_steps) that SUPO counts."""

import pytest

from agentgym.env import BaseEnv
from agentgym.errors import ConfigError
from agentgym.policies import RandomPolicy
from agentgym.rollout import RolloutConfig, run_episode
from agentgym.trainers.collect import collect
from agentgym.trainers.config import load_config
from agentgym.trainers.supo import is_overlong
from agentgym.types import Message, StepResult


class Endless(BaseEnv):
    async def _reset(self, seed, options):
        return [Message("user", "go")], {}

    async def _step(self, action):
        return StepResult((Message("user", "again"),), reward=0.0)


async def test_rollout_max_steps_reaches_the_engine():
    seen = []

    async def runner(make_env, agent, seeds, config, *, env_id):
        seen.append(config.max_steps)
        return []

    config = load_config(None, ["rollout.max_steps=3", "env.id=agentgym/MentalMath-v0"])
    await collect(config, None, [0], 2, 1.0, 0, runner=runner)  # type: ignore[arg-type]
    await collect(config, None, [0], 1, 0.0, 0, runner=runner, evaluation=True, max_turns=9)  # type: ignore[arg-type]
    await collect(config, None, [0], 2, 1.0, 0, runner=runner, max_turns=9)  # type: ignore[arg-type]
    assert seen == [3, 3, 9]  # the horizon schedule's cap replaces it in training only
    assert load_config(None, []).rollout.max_steps == 100
    with pytest.raises(ConfigError, match="rollout.max_steps must be an int >= 1"):
        load_config(None, ["rollout.max_steps=0"])


async def test_an_episode_cut_by_the_cap_is_overlong():
    traj = await run_episode(Endless(), RandomPolicy(0), seed=0, group_id="g",
                             config=RolloutConfig(max_steps=3))
    assert traj.status == "truncated" and len(traj.steps) == 3
    assert is_overlong(traj)
