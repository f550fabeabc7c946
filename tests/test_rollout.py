import asyncio

import agentgym
from agentgym import BaseEnv, Group, Message, StepResult
from agentgym.jsonl import read_trajectories, write_trajectories
from agentgym.policies import RandomPolicy, ScriptedPolicy
from agentgym.rollout import RolloutConfig, run_episode, run_groups


async def test_scripted_groups_share_task_and_succeed(tmp_path):
    trajs = await run_groups(lambda: agentgym.make("agentgym/Arithmetic-v0"), ScriptedPolicy(),
                             seeds=[0, 1, 2], config=RolloutConfig(group_size=3),
                             env_id="agentgym/Arithmetic-v0")
    assert len(trajs) == 9
    groups = Group.from_trajectories(trajs)
    assert len(groups) == 3 and all(len(g.trajectories) == 3 for g in groups)
    assert all(t.status == "terminated" and t.outcome_reward == 1.0 for t in trajs)
    for t in trajs:
        assert t.steps[0].state_key is not None and t.seed in (0, 1, 2)
    path = tmp_path / "t.jsonl"
    assert write_trajectories(path, trajs) == 9
    assert list(read_trajectories(path)) == trajs


class _Explodes(BaseEnv):
    async def _reset(self, seed, options):
        return [Message("user", "go")], {"task_id": "boom"}

    async def _step(self, action):
        raise ConnectionError("container died")


class _Slow(_Explodes):
    async def _step(self, action):
        await asyncio.sleep(10)


async def test_env_fault_becomes_error_trajectory_and_batch_goes_on():
    envs = iter([_Explodes(), agentgym.make("agentgym/Arithmetic-v0")])
    trajs = await run_groups(lambda: next(envs), RandomPolicy(0), seeds=[0, 1],
                             config=RolloutConfig(concurrency=1))
    bad, good = trajs
    assert bad.status == "error" and bad.outcome_reward is None
    assert "ConnectionError: container died" in bad.error
    assert good.status in ("terminated", "truncated")


async def test_episode_timeout_is_an_error():
    traj = await run_episode(_Slow(), RandomPolicy(0), seed=0, group_id="g",
                             config=RolloutConfig(step_timeout=0.2))
    assert traj.status == "error" and "timeout" in traj.error and traj.task_id == "boom"


class _Endless(BaseEnv):
    async def _reset(self, seed, options):
        return [Message("user", "go")], {}

    async def _step(self, action):
        return StepResult((Message("user", "again"),), reward=0.5)


async def test_max_steps_truncates_and_outcome_sums_rewards():
    traj = await run_episode(_Endless(), RandomPolicy(0), seed=0, group_id="g",
                             config=RolloutConfig(max_steps=4))
    assert traj.status == "truncated" and len(traj.steps) == 4 and traj.outcome_reward == 2.0


async def test_expert_spec_plays_an_awaitable_expert_action():
    """``expert`` names the scripted agent, which also awaits an async ``expert_action``."""
    from agentgym.policies import make_agent

    class AsyncExpert:
        async def expert_action(self) -> Message:
            return Message("assistant", "42")

    episode = make_agent("expert").start([], AsyncExpert())
    action, tokens = await episode.act()
    assert action.content == "42" and tokens is None
