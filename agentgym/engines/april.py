r"""Active partial rollouts: APRIL (Zhou et al. 2025, arXiv 2509.18521).

Episode lengths in agent RL are long-tailed: a round that waits for all of its episodes is
as slow as its slowest one, and the generator idles meanwhile. APRIL over-provisions:

    in flight:  ⌈B · oversample⌉ groups of G episodes (new groups top the pool up each round)
    round ends: as soon as B groups have every one of their G episodes finished
    carried:    every unfinished episode is parked and resumes in the next round

so a round lasts until the B-th group finishes, not the slowest episode. Nothing is thrown
away: a parked episode keeps its env (its state), its context (the exact token ids so far),
and its recorded steps, each with the behaviour log-probs and the policy version that
sampled it. When it resumes after a weight update its new turns carry the new version, and
the trainer's importance correction (``agentgym.trainers.methods.offpolicy``) treats the older
turns as stale.

Groups stay whole: a group is handed over only when all G rollouts finished (error ones
count as finished), so group baselines always see G rollouts. Finished episodes of a group
whose siblings are still running wait in the pool.

Deviations from the paper (which aborts in-flight generation requests in SGLang and keeps
their partial token output):

- Episodes are parked at turn boundaries, before a policy call. When a round's target is
  reached, turns already under way (a policy call and its env step) finish first, so every
  recorded turn was sampled by one set of weights and the update never runs while the
  in-process generator reads the weights. A round's tail is then at most one turn, not the
  rest of the slowest episode.
- Every parked episode is resumed in the next round (the paper's buffer may also drop old
  partial rollouts); the trainer bounds their age with its staleness limit.
- ``rollout.concurrency`` does not apply: the episodes in flight are the pool's groups × G.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from agentgym.env import Env
from agentgym.errors import ConfigError
from agentgym.rollout import Agent, RolloutConfig, run_in_fresh_env
from agentgym.types import Trajectory


@dataclass(frozen=True)
class AprilConfig:
    """Active partial rollouts (the ``rollout.april`` section of a training config)."""

    enabled: bool = False
    """Over-provision groups, end a round once enough groups finished, carry the rest."""
    oversample: float = 2.0
    """Groups in flight per group a round hands over (⌈tasks_per_step · oversample⌉)."""
    max_staleness: int = 4
    """Drop a finished trajectory with a turn sampled more than this many policy versions
    before its update (a carried episode ages one version per round it waits)."""

    def __post_init__(self) -> None:
        if not self.oversample >= 1.0:
            raise ConfigError(f"rollout.april.oversample must be >= 1 (groups in flight per "
                              f"group trained), got {self.oversample}; 2.0 is the paper's")
        if self.max_staleness < 1:
            raise ConfigError(f"rollout.april.max_staleness must be >= 1, got "
                              f"{self.max_staleness}; carried episodes are at least one "
                              "version old")


@dataclass
class _Group:
    seed: int
    group_id: str
    size: int
    done: dict[int, Trajectory] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.done) == self.size


class PartialRollouts:
    """A pool of episodes that outlive a round (module docstring).

    Args:
        config: Over-provisioning.
        first_seed: Seed of the first group; each new group takes the next one.
    """

    def __init__(self, config: AprilConfig, first_seed: int = 0) -> None:
        self.config = config
        self.next_seed = first_seed
        """Seed of the next group to launch."""
        self._groups: list[_Group] = []
        self._gate = asyncio.Event()  # set: episodes may take turns
        self._progress = asyncio.Event()  # an episode finished or parked
        self._parked = 0
        self._lock = asyncio.Lock()  # rounds run one after another

    @property
    def in_flight(self) -> int:
        """Episodes started and not finished (parked ones included)."""
        return sum(g.size - len(g.done) for g in self._groups)

    async def round(self, make_env: Callable[[], Env], agent: Agent, groups: int,
                    config: RolloutConfig | None = None, *, env_id: str | None = None
                    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Resume the carried episodes, top the pool up, and return ``groups`` whole groups.

        Args:
            make_env: Builds one env per new episode.
            agent: Starts this round's new episodes (carried ones keep their own).
            groups: Whole groups to hand over.
            config: ``group_size`` and the limits of this round's new episodes (default:
                ``RolloutConfig()``).
            env_id: Recorded in the trajectories.

        Returns:
            The trajectories of the ``groups`` earliest-launched complete groups, ordered by
            group then rollout index, and the round's metrics (``april/*``).
        """
        config = config or RolloutConfig()
        if groups < 1:
            raise ValueError(f"groups must be >= 1, got {groups}")
        async with self._lock:
            carried = self.in_flight
            target = math.ceil(groups * self.config.oversample)
            while len(self._groups) < target:
                self._launch(make_env, agent, config, env_id)
            self._gate.set()
            while sum(g.complete for g in self._groups) < groups:
                await self._wait()
            self._gate.clear()  # turns under way finish; every other episode parks
            while self._parked < self.in_flight:
                await self._wait()
            ready = [g for g in self._groups if g.complete][:groups]
            self._groups = [g for g in self._groups if g not in ready]
            trajs = [g.done[i] for g in ready for i in range(g.size)]
            return trajs, {
                "april/carried_in": float(carried),
                "april/carried_out": float(self.in_flight),
                "april/groups_in_flight": float(target),
                "april/finished_waiting": float(sum(len(g.done) for g in self._groups)),
            }

    def _launch(self, make_env: Callable[[], Env], agent: Agent, config: RolloutConfig,
                env_id: str | None) -> None:
        seed, self.next_seed = self.next_seed, self.next_seed + 1
        group = _Group(seed, f"{env_id or 'env'}:{seed}", config.group_size)
        self._groups.append(group)
        for i in range(group.size):  # started in order, as run_groups starts them
            group.tasks.append(asyncio.ensure_future(
                self._episode(group, i, make_env, agent, config, env_id)))

    async def _episode(self, group: _Group, index: int, make_env: Callable[[], Env],
                       agent: Agent, config: RolloutConfig, env_id: str | None) -> None:
        traj = await run_in_fresh_env(make_env, agent, seed=group.seed,
                                      group_id=group.group_id, config=config, env_id=env_id,
                                      pause=self._pause)
        group.done[index] = traj
        self._progress.set()

    async def _pause(self) -> None:
        if self._gate.is_set():
            return
        self._parked += 1
        self._progress.set()
        try:
            await self._gate.wait()
        finally:
            self._parked -= 1

    async def _wait(self) -> None:
        await self._progress.wait()
        self._progress.clear()

    async def aclose(self) -> None:
        """Cancel every carried episode (their envs are closed)."""
        tasks = [t for g in self._groups for t in g.tasks if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._groups.clear()
