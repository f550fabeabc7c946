"""Where a training step's rollouts come from: one interface, four collectors.

    collect(step, seeds) -> Collection(trajectories, metrics, next_seed)

The loop picks each step's task seeds (in order, or a method's task sampler) and a collector
runs them; only APRIL, whose pool picks its own tasks, says where the seed stream goes on.

- :class:`EmbeddedCollector`: episodes in this process, sampled with the trained weights
  themselves (the backend shares them, so a weight sync is a version bump).
- :class:`EngineCollector`: episodes on a generator that holds its own copy of the weights
  (a vLLM engine, Ray generation workers, or a second in-process copy under FSDP); each step
  records the policy version that sampled it (``StepTokens.policy_version``).
- :class:`AprilCollector`: partial rollouts (APRIL, :mod:`agentgym.engines.april`): a step
  ends once ``tasks_per_step`` groups finished; unfinished episodes carry over into the
  next step, so it takes seeds as it needs them (``Collection.next_seed``).
- :class:`AheadCollector`: wraps one of the others and collects steps k+1 … k+N while step
  k trains (async training, ``async_training.enabled``; one-step-off when N = 1).

The last two are *off-policy*: a trained turn may be older than the weights. At collection,
with current version v, a trajectory holding a step sampled by version u with staleness
s = v − u > N is dropped (``async/dropped_stale``); the off-policy correction method
(``agentgym/trainers/methods/offpolicy``) importance-weights the steps with 1 ≤ s ≤ N. Every
collector also answers ``runner``: how other rollouts (held-out evaluation, SPA's
exploration) run on the same generator.

Every step k samples with seed ``seed · 100003 + k`` and caps its turns at the horizon
schedule's value for k, whichever collector runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from agentgym.engines.versioned import VersionedAgent
from agentgym.policies.base import TrainablePolicy
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.trainers.collect import Runner, collect
from agentgym.trainers.config import TrainConfig
from agentgym.types import Trajectory

if TYPE_CHECKING:
    from agentgym.engines.april import PartialRollouts
    from agentgym.engines.ray_engine import RayEngine


@dataclass(frozen=True)
class Collection:
    """A step's rollouts, as a collector gives them."""

    trajectories: list[Trajectory]
    """The rollouts (error ones included), within the staleness bound."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The collector's own metrics (``horizon/*``, ``async/*``, ``april/*``)."""
    next_seed: int | None = None
    """Where the seed stream goes on (APRIL takes seeds as it needs them); None: after the
    seeds the step was given."""


class Collector(Protocol):
    """Gives each training step its rollouts."""

    policy: TrainablePolicy
    """The generation backend episodes sample from (its ``policy_version`` is logged)."""
    off_policy: bool
    """Whether a trained turn may be older than the weights being trained."""

    async def collect(self, step: int, seeds: Sequence[int]) -> Collection:
        """The rollouts of ``step``.

        ``group_size`` rollouts of each of ``seeds``' tasks (APRIL: ``len(seeds)`` groups
        of tasks it picks itself).
        """
        ...

    @property
    def runner(self) -> Runner | None:
        """How other rollouts run on this generator (None: in this process)."""
        ...

    async def aclose(self) -> None:
        """Stop background work and the generator's workers."""
        ...


def step_staleness(traj: Trajectory, version: int) -> list[int]:
    """Staleness ``version - policy_version`` of each step (0 where the version is unknown)."""
    return [version - s.tokens.policy_version
            if s.tokens is not None and s.tokens.policy_version is not None else 0
            for s in traj.steps]


def drop_stale(trajs: Sequence[Trajectory], version: int, max_staleness: int
               ) -> tuple[list[Trajectory], dict[str, float]]:
    """Drop trajectories with a step older than ``max_staleness`` versions.

    Returns:
        The kept trajectories (error ones untouched) and the staleness metrics of the kept
        steps.
    """
    kept, seen, dropped = [], [], 0
    for traj in trajs:
        ages = step_staleness(traj, version)
        if traj.scorable and ages and max(ages) > max_staleness:
            dropped += 1
            continue
        kept.append(traj)
        seen += ages
    return kept, {"async/staleness_mean": float(np.mean(seen)) if seen else 0.0,
                  "async/staleness_max": float(max(seen, default=0)),
                  "async/dropped_stale": float(dropped)}


class EmbeddedCollector:
    """Episodes in this process on the policy whose weights are trained."""

    off_policy = False

    def __init__(self, config: TrainConfig, policy: TrainablePolicy) -> None:
        self.config, self.policy = config, policy

    @property
    def runner(self) -> Runner | None:
        """None: :func:`agentgym.rollout.run_groups` in this process."""
        return None

    async def collect(self, step: int, seeds: Sequence[int]) -> Collection:
        """The step's groups, sampled at the training temperature."""
        return await self._collect(step, seeds, self.runner)

    async def _collect(self, step: int, seeds: Sequence[int], runner: Runner | None
                       ) -> Collection:
        cfg = self.config
        horizon = cfg.rollout.horizon_schedule.at(step)  # ScalingInter-RL's turn cap, or None
        trajs = await collect(cfg, self.policy, seeds, cfg.rollout.group_size,
                              cfg.rollout.temperature, seed=cfg.seed * 100_003 + step,
                              runner=runner, max_turns=horizon)
        metrics = {} if horizon is None else {"horizon/max_turns": float(horizon)}
        return Collection(trajs, metrics)

    async def aclose(self) -> None:
        """Nothing runs in the background."""


class EngineCollector(EmbeddedCollector):
    """Episodes on a generator with its own weights: in this process, or on Ray workers.

    Args:
        config: The run's config.
        policy: The in-process generation backend (a vLLM engine, a copy of the weights, or
            the trained model when only the Ray workers generate).
        engine: The Ray engine, or None for in-process episodes.
        version: The current policy version, where a staleness bound applies (collecting
            ahead): trajectories staler than ``max_staleness`` are then dropped.
        max_staleness: N, the bound.
    """

    def __init__(self, config: TrainConfig, policy: TrainablePolicy,
                 engine: RayEngine | None = None, version: Callable[[], int] | None = None,
                 max_staleness: int = 0) -> None:
        super().__init__(config, policy)
        self.engine, self.version, self.max_staleness = engine, version, max_staleness

    @property
    def runner(self) -> Runner:
        """:meth:`run_groups`: versions recorded, on the Ray engine if there is one."""
        return self.run_groups

    async def collect(self, step: int, seeds: Sequence[int]) -> Collection:
        """The step's groups (within the staleness bound, where one applies)."""
        return self.bound(await self.rollouts(step, seeds))

    async def rollouts(self, step: int, seeds: Sequence[int]) -> Collection:
        """The step's groups, before any staleness bound."""
        return await self._collect(step, seeds, self.runner)

    def bound(self, got: Collection) -> Collection:
        """``got`` less the trajectories staler than the bound, now (if one applies)."""
        if self.version is None:
            return got
        trajs, metrics = drop_stale(got.trajectories, self.version(), self.max_staleness)
        return replace(got, trajectories=trajs, metrics={**got.metrics, **metrics})

    async def run_groups(self, make_env: Callable[[], Any], agent: Any, seeds: Sequence[int],
                         config: RolloutConfig | None = None, *, env_id: str | None = None,
                         on_done: Callable[[Trajectory], None] | None = None
                         ) -> list[Trajectory]:
        """:func:`agentgym.rollout.run_groups` on the generator, each step's version recorded."""
        agent, config = VersionedAgent(agent), config or RolloutConfig()
        if self.engine is None:
            return await run_groups(make_env, agent, seeds, config, env_id=env_id,
                                    on_done=on_done)
        return await self.engine.run_groups(make_env, agent, seeds, config, env_id=env_id,
                                            on_done=on_done)

    async def aclose(self) -> None:
        """Stop the Ray workers."""
        if self.engine is not None:
            await self.engine.aclose()


class AprilCollector(EngineCollector):
    """Partial rollouts: a step's groups come from a pool that carries unfinished episodes.

    Other rollouts (evaluation, exploration) run beside the pool, versions recorded.

    Args:
        config: The run's config (``rollout.april.max_staleness`` bounds the carried turns,
            and any overlap too).
        policy: The in-process generation backend.
        pool: The partial-rollout pool.
        version: The current policy version (read at collection).
    """

    off_policy = True

    def __init__(self, config: TrainConfig, policy: TrainablePolicy, pool: PartialRollouts,
                 version: Callable[[], int]) -> None:
        super().__init__(config, policy, version=version,
                         max_staleness=config.rollout.april.max_staleness)
        self.pool = pool
        self._round_metrics: list[dict[str, float]] = []

    async def rollouts(self, step: int, seeds: Sequence[int]) -> Collection:
        """The step's groups from the pool, before the staleness bound."""
        got = await self._collect(step, seeds, self._round)
        metrics = {**got.metrics, **(self._round_metrics.pop(0) if self._round_metrics
                                     else {})}  # rounds finish in step order
        return replace(got, metrics=metrics, next_seed=self.pool.next_seed)

    async def _round(self, make_env: Callable[[], Any], agent: Any, seeds: Sequence[int],
                     config: RolloutConfig, *, env_id: str | None = None) -> list[Trajectory]:
        """A :data:`~agentgym.trainers.collect.Runner` on the pool: ``len(seeds)`` groups."""
        trajs, metrics = await self.pool.round(make_env, VersionedAgent(agent), len(seeds),
                                               config, env_id=env_id)
        self._round_metrics.append(metrics)
        return trajs

    async def aclose(self) -> None:
        """Stop the pool's episodes."""
        await self.pool.aclose()


class AheadCollector:
    """Collects up to N steps ahead of the update, in the background.

    The rollouts of steps k+1 … k+N are collected while step k trains; an episode that runs
    across a weight sync resumes with the new weights (a partial rollout). The staleness
    bound is applied when a step's rollouts are taken, with the version of that moment.

    Args:
        inner: The collector that runs each step (an engine or APRIL one, with the
            staleness bound set).
        config: The run's config (``async_training.max_staleness`` is N).
    """

    off_policy = True

    def __init__(self, inner: EngineCollector, config: TrainConfig) -> None:
        self.inner, self.config = inner, config
        self.policy = inner.policy
        self._pending: dict[int, asyncio.Task[Collection]] = {}

    @property
    def runner(self) -> Runner | None:
        """The inner collector's."""
        return self.inner.runner

    async def collect(self, step: int, seeds: Sequence[int]) -> Collection:
        """Step ``step``'s rollouts, launching the next N steps' (seeds follow on in order)."""
        cfg = self.config
        n = len(seeds)
        for k in range(step, min(step + cfg.async_training.max_staleness, cfg.steps - 1) + 1):
            if k not in self._pending:
                first = seeds[0] + (k - step) * n
                self._pending[k] = asyncio.ensure_future(
                    self.inner.rollouts(k, range(first, first + n)))
        return self.inner.bound(await self._pending.pop(step))

    async def aclose(self) -> None:
        """Cancel the steps collected ahead, then close the inner collector."""
        for task in self._pending.values():
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)
        self._pending.clear()
        await self.inner.aclose()
