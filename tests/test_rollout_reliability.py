"""Faults around episodes: a failing or hanging close, timeouts that name their limit, lazy work."""

import asyncio
import logging
import time

import agentgym
from agentgym import BaseEnv, Message
from agentgym.policies import RandomPolicy
from agentgym.rollout import RolloutConfig, run_episode, run_groups


class _CloseRaises(BaseEnv):
    async def _reset(self, seed, options):
        return [Message("user", "go")], {}

    async def _step(self, action):
        from agentgym import StepResult
        return StepResult((Message("user", "done"),), 1.0, terminated=True)

    async def aclose(self):
        raise RuntimeError("socket already gone")


class _CloseHangs(_CloseRaises):
    async def aclose(self):
        await asyncio.sleep(3600)


class _CloseIgnoresCancel(_CloseRaises):
    async def aclose(self):
        for _ in range(3):  # swallows two cancels, then gives up
            try:
                await asyncio.sleep(0.3)
            except asyncio.CancelledError:
                continue


async def test_a_close_that_raises_keeps_every_trajectory_and_is_counted(caplog):
    envs = iter([agentgym.make("agentgym/MentalMath-v0"), _CloseRaises(),
                 agentgym.make("agentgym/MentalMath-v0")])
    with caplog.at_level(logging.WARNING, logger="agentgym.rollout"):
        trajs = await run_groups(lambda: next(envs), RandomPolicy(0), seeds=[0, 1, 2],
                                 config=RolloutConfig(concurrency=1))
    assert len(trajs) == 3 and all(t.status != "error" for t in trajs)
    assert [t.metrics.get("close_failed", 0.0) for t in trajs] == [0.0, 1.0, 0.0]
    assert trajs[1].outcome_reward == 1.0  # the finished episode still counts
    assert "socket already gone" in caplog.text


async def test_a_close_that_hangs_is_bounded():
    start = time.perf_counter()
    trajs = await run_groups(_CloseHangs, RandomPolicy(0), seeds=[0, 1],
                             config=RolloutConfig(close_timeout=0.3))
    assert time.perf_counter() - start < 5
    assert all(t.metrics["close_failed"] == 1.0 and t.outcome_reward == 1.0 for t in trajs)


async def test_a_close_that_ignores_cancel_does_not_hold_the_batch():
    start = time.perf_counter()
    trajs = await run_groups(_CloseIgnoresCancel, RandomPolicy(0), seeds=[0],
                             config=RolloutConfig(close_timeout=0.1))
    assert time.perf_counter() - start < 2
    assert trajs[0].metrics["close_failed"] == 1.0
    await asyncio.sleep(1)  # let the abandoned close end before the loop closes


class _SlowStep(_CloseRaises):
    async def _step(self, action):
        await asyncio.sleep(10)

    async def aclose(self):
        return None


class _BackendTimesOut:
    """An agent whose backend gives up on its own (an HTTP client timeout)."""

    def start(self, prompt, env):
        return self

    async def act(self):
        raise TimeoutError("http://gpu-box:8000/v1 did not answer within 5 s (6 tries)")

    def observe(self, observation):
        pass


async def test_a_backend_timeout_is_not_blamed_on_the_step_timeout():
    traj = await run_episode(_SlowStep(), _BackendTimesOut(), seed=0, group_id="g",
                             config=RolloutConfig(step_timeout=100))
    assert traj.status == "error" and "gpu-box:8000" in traj.error
    assert "step timeout" not in traj.error


async def test_a_step_timeout_names_what_ran_past_it():
    traj = await run_episode(_SlowStep(), RandomPolicy(0), seed=0, group_id="g",
                             config=RolloutConfig(step_timeout=0.2))
    assert traj.status == "error" and traj.outcome_reward is None
    assert "env.step() ran past the step timeout (0.2 s)" in traj.error


async def test_an_episode_timeout_names_the_episode_limit():
    traj = await run_episode(_SlowStep(), RandomPolicy(0), seed=0, group_id="g",
                             config=RolloutConfig(step_timeout=None, episode_timeout=0.2))
    assert traj.status == "error" and "episode ran past its timeout (0.2 s)" in traj.error


async def test_seeds_are_taken_lazily():
    taken = 0

    def seeds():
        nonlocal taken
        for seed in range(10**12):  # building every pair up front would exhaust memory
            if taken >= 6:
                return
            taken += 1
            yield seed

    seen: list[int] = []
    trajs = await run_groups(lambda: agentgym.make("agentgym/MentalMath-v0"), RandomPolicy(0),
                             seeds(), RolloutConfig(concurrency=2, group_size=2),
                             on_done=lambda t: seen.append(taken))
    assert [t.seed for t in trajs] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert seen[0] <= 2  # the first episode ended before the rest of the work was built


class _SlowReset(_SlowStep):
    """Starts slowly, as one of many cold engines or browsers on a busy machine does."""

    async def reset(self, seed=None, options=None):
        await asyncio.sleep(0.6)
        return await super().reset(seed=seed, options=options)


async def test_a_slow_start_is_not_an_error_but_a_reset_limit_still_applies():
    """The reset is not bounded by the step timeout (30 cold ScienceWorld engines started at
    once on a loaded machine all ended as errors that way), only by its own limit if set."""
    traj = await run_episode(_SlowReset(), _BackendTimesOut(), seed=0, group_id="g",
                             config=RolloutConfig(step_timeout=0.2))
    assert "reset" not in (traj.error or "")  # it started; the agent's fault ended it
    traj = await run_episode(_SlowReset(), RandomPolicy(0), seed=0, group_id="g",
                             config=RolloutConfig(step_timeout=None, reset_timeout=0.2))
    assert traj.status == "error" and "env.reset() ran past the reset timeout (0.2 s)" in \
        traj.error
    traj = await run_episode(_SlowReset(), RandomPolicy(0), seed=0, group_id="g",
                             config=RolloutConfig(step_timeout=None, episode_timeout=0.2))
    assert traj.status == "error" and "episode ran past its timeout (0.2 s)" in traj.error
