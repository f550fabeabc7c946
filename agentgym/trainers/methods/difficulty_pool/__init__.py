"""A difficulty-pool curriculum: which tasks a step trains on follows how they went before.

prime-rl's online difficulty buffer sorts problems by the success their rollouts saw and
samples each batch from easy, normal and hard pools in set shares. Here a
task is a training seed. After each step, every task's group puts it in a pool by its
success rate p (the shared success rule, :func:`agentgym.evaluation.metrics.succeeded`):
**easy** (p = 1), **hard** (p = 0) or **medium** (0 < p < 1: the rollouts disagreed, so the
group had a learning signal). Each step's ``tasks_per_step`` tasks are then drawn, without
replacement and from a generator seeded by the run's seed and the step, as

    round(easy · n) from the easy pool, round(hard · n) from the hard one,
    round(medium · n) from the medium one, and the rest fresh from the seed stream,

with any pool short of its share topped up by fresh seeds. A drawn task leaves its pool and
comes back to one when its new group is seen. The pools are saved beside every checkpoint
and restored on ``--resume``.

    methods: {difficulty_pool: {easy: 0.0, medium: 0.5, hard: 0.1}}

Runs with collectors whose seeds are planned ahead (async training, APRIL) and env mixes
(whose seeds index several envs) are refused. Metrics: ``pool/easy``, ``pool/medium``,
``pool/hard`` (pool sizes after the step), ``pool/revisited`` (tasks drawn from a pool).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from agentgym.errors import ConfigError
from agentgym.evaluation.metrics import succeeded
from agentgym.files import atomic_write
from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group

if TYPE_CHECKING:
    from agentgym.trainers.config import TrainConfig

POOLS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class DifficultyPoolOptions:
    """``methods.difficulty_pool``: each pool's share of a step's tasks."""

    easy: float = 0.0
    """Share re-drawn from tasks every rollout solved."""
    medium: float = 0.5
    """Share re-drawn from tasks whose rollouts disagreed."""
    hard: float = 0.1
    """Share re-drawn from tasks no rollout solved."""

    def __post_init__(self) -> None:
        shares = (self.easy, self.medium, self.hard)
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and 0 <= x <= 1
                   for x in shares) or sum(shares) > 1:
            raise ValueError(f"easy, medium and hard are shares in [0, 1] summing to at most "
                             f"1 (the rest are fresh tasks), got {shares}")


class DifficultyPools:
    """The task sampler, the group transform that sorts tasks into pools, and its state."""

    def __init__(self, options: DifficultyPoolOptions, seed: int) -> None:
        self.options, self.seed = options, seed
        self.pools: dict[str, list[int]] = {name: [] for name in POOLS}
        self.revisited = 0

    def tasks(self, step: int, next_seed: int, n: int) -> tuple[list[int], int]:
        """The step's ``n`` task seeds and the seed stream's next fresh one."""
        rng = np.random.default_rng([self.seed, step])
        chosen: list[int] = []
        for name in POOLS:
            pool = self.pools[name]
            take = min(round(getattr(self.options, name) * n), len(pool), n - len(chosen))
            picked = sorted(rng.choice(len(pool), size=take, replace=False).tolist())
            chosen += [pool[i] for i in picked]
            self.pools[name] = [s for i, s in enumerate(pool) if i not in set(picked)]
        self.revisited = len(chosen)
        fresh = n - len(chosen)
        return chosen + list(range(next_seed, next_seed + fresh)), next_seed + fresh

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        """Sort the step's tasks into pools by their groups' success (groups unchanged)."""
        rates: dict[int, list[bool]] = {}
        for traj in ctx.trajectories:
            if traj.scorable and traj.seed is not None:
                rates.setdefault(traj.seed, []).append(succeeded(traj))
        for seed, wins in sorted(rates.items()):
            p = sum(wins) / len(wins)
            self.pools["easy" if p == 1 else "hard" if p == 0 else "medium"].append(seed)
        metrics.update({f"pool/{name}": float(len(self.pools[name])) for name in POOLS})
        metrics["pool/revisited"] = float(self.revisited)
        return list(groups)

    def save(self, run_dir: Path, step: int) -> Path:
        """The pools of ``step``, as JSON beside the run's checkpoints."""
        path = Path(run_dir) / "difficulty_pool" / f"step-{step:06d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(self.pools, sort_keys=True))
        return path

    def load(self, run_dir: Path, step: int) -> None:
        """Restore the pools saved at ``step``.

        Raises:
            ConfigError: The run folder has no pools for that step.
        """
        path = Path(run_dir) / "difficulty_pool" / f"step-{step:06d}.json"
        if not path.is_file():
            raise ConfigError(f"--resume: {path} is missing; the difficulty pools of step "
                              f"{step} were not saved (resume a run that used the method)")
        saved = json.loads(path.read_text())
        self.pools = {name: [int(s) for s in saved.get(name, [])] for name in POOLS}


def check(config: TrainConfig) -> None:
    """Env mixes are refused: their seeds index several envs' tasks."""
    if "difficulty_pool" in config.methods and config.envs:
        raise ConfigError("methods.difficulty_pool samples one env's task seeds; an envs mix "
                          "is not supported: train one env or remove the method")


def build(ctx: MethodContext) -> Hooks:
    """The sampler, its pool-sorting transform (after every other) and its saved pools."""
    pools = DifficultyPools(ctx.options, ctx.config.seed)
    return Hooks(transforms=(pools,), task_sampler=pools, state=(pools,))


register_method("difficulty_pool", build=build, options=DifficultyPoolOptions, order=99,
                check=check, collectors=frozenset({"embedded", "vllm", "llamacpp", "ray"}),
                summary="a curriculum of easy / medium / hard task pools (prime-rl)")
