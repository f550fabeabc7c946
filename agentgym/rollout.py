"""Run episodes of an env against an actor and record them as trajectories.

An *actor* is an async function ``act(history, env) -> (action, tokens)``: it reads the
chat history so far and returns the assistant message (and the exact tokens when a model
produced it). Infrastructure faults (the env or the actor raising, a timeout) end the
episode as a ``status="error"`` trajectory; the other episodes go on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from agentgym.env import Env
from agentgym.types import Message, Step, StepTokens, Trajectory

Actor = Callable[[Sequence[Message], Env], Awaitable[tuple[Message, StepTokens | None]]]


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run."""

    group_size: int = 1
    """Rollouts per task (same seed), forming one group."""
    concurrency: int = 16
    """Episodes in flight at once."""
    max_steps: int = 100
    """Safety cap on steps for envs without a turn limit (the episode is truncated)."""
    episode_timeout: float | None = 600.0
    """Seconds an episode may take before it is ended as an error."""

    def __post_init__(self) -> None:
        for name in ("group_size", "concurrency", "max_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


async def run_episode(env: Env, act: Actor, *, seed: int | None, group_id: str,
                      max_steps: int = 100, time_limit: float | None = None,
                      env_id: str | None = None) -> Trajectory:
    """Play one episode; never raises for env or actor faults (they give an error trajectory).

    Args:
        env: The env (reset here, not closed).
        act: The actor.
        seed: Seed for ``reset``.
        group_id: Recorded in the trajectory.
        max_steps: Steps after which the episode is truncated.
        time_limit: Seconds after which the episode ends as an error.
        env_id: Recorded in the trajectory.
    """
    start = time.perf_counter()
    traj_id, task_id = uuid.uuid4().hex, f"seed-{seed}"
    prompt: tuple[Message, ...] = ()
    steps: list[Step] = []
    try:
        async with asyncio.timeout(time_limit):
            observation, info = await env.reset(seed=seed)
            task_id = str(info.get("task_id", task_id))
            prompt = tuple(observation)
            history, key = list(observation), info.get("state_key")
            status = "truncated"
            for index in range(max_steps):
                action, tokens = await act(history, env)
                result = await env.step(action)
                steps.append(Step(index, action, result, tokens, key, result.valid))
                history += [action, *result.observation]
                key = result.info.get("state_key")
                if result.done:
                    status = "terminated" if result.terminated else "truncated"
                    break
    except Exception as exc:  # an infrastructure fault, counted, never scored
        if isinstance(exc, TimeoutError):
            exc = TimeoutError(f"episode timed out after {time_limit} s")
        return Trajectory(traj_id, task_id, group_id, prompt, tuple(steps), status="error",
                          error=f"{type(exc).__name__}: {exc}", env_id=env_id, seed=seed,
                          tools=tuple(env.tools),
                          metrics={"wall_s": time.perf_counter() - start})
    return Trajectory(traj_id, task_id, group_id, prompt, tuple(steps), status=status,
                      env_id=env_id, seed=seed, tools=tuple(env.tools),
                      metrics={"wall_s": time.perf_counter() - start}).with_outcome()


async def run_groups(make_env: Callable[[], Env], act: Actor, seeds: Sequence[int],
                     config: RolloutConfig = RolloutConfig(), *, env_id: str | None = None,
                     on_done: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Run ``config.group_size`` episodes for each seed, each in a fresh env.

    Args:
        make_env: Builds one env per episode (closed after it).
        act: The actor.
        seeds: One task per seed.
        config: Group size, concurrency, limits.
        env_id: Recorded in the trajectories.
        on_done: Called with each trajectory as it finishes (streaming, progress).

    Returns:
        The trajectories, ordered by seed then rollout index.
    """
    gate = asyncio.Semaphore(config.concurrency)

    async def one(seed: int, group_id: str) -> Trajectory:
        async with gate:
            env = make_env()
            try:
                traj = await run_episode(env, act, seed=seed, group_id=group_id,
                                         max_steps=config.max_steps,
                                         time_limit=config.episode_timeout, env_id=env_id)
            finally:
                await env.aclose()
        if on_done is not None:
            on_done(traj)
        return traj

    jobs = [one(seed, f"{env_id or 'env'}:{seed}") for seed in seeds
            for _ in range(config.group_size)]
    return list(await asyncio.gather(*jobs))
