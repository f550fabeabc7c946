"""Held-out success before and after training, task by task, and the gain's 95% interval.

Every held-out evaluation writes each task's outcome (seed → success; with several sampled
draws per seed, its share of successes) to ``<run_dir>/heldout/step-<N>.json``. The last
evaluation is compared with the one before training over the tasks scored in both, as a
paired difference: the same tasks before and after, so task difficulty cancels out. The
interval is a percentile bootstrap over tasks (Efron & Tibshirani 1993, ch. 13), resampling
task indices once for both evaluations::

    gain = mean_i(after_i - before_i)
    gain*_r = mean_{i in I_r}(after_i - before_i),  I_r = n task indices drawn with replacement
    95% interval = [2.5th, 97.5th percentile of gain*_1..R]

Errored episodes (infrastructure faults) have no outcome; their tasks leave the pairing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from agentgym.evaluation.metrics import succeeded
from agentgym.evaluation.stats import paired_bootstrap
from agentgym.files import atomic_write
from agentgym.types import Trajectory

RESAMPLES = 10_000
"""Bootstrap resamples (seeded: the interval is the same on every run of the same data)."""


def outcomes_path(run_dir: str | Path, step: int) -> Path:
    """Where the held-out outcomes of the evaluation after ``step`` steps are kept."""
    return Path(run_dir) / "heldout" / f"step-{step}.json"


def task_outcomes(trajs: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """Each task's success, keyed by ``prefix`` and its seed.

    A task with one scorable episode gets whether it succeeded; one with several
    (``env.eval_draws``) gets the share that did. Error episodes are left out.
    """
    episodes: dict[str, list[bool]] = {}
    for t in trajs:
        if t.scorable:
            key = prefix + str(t.seed if t.seed is not None else t.task_id)
            episodes.setdefault(key, []).append(bool(succeeded(t)))
    return {k: v[0] if len(v) == 1 else sum(v) / len(v) for k, v in episodes.items()}


def write_outcomes(run_dir: str | Path, step: int, outcomes: Mapping[str, float]) -> Path:
    """Keep the outcomes of the evaluation after ``step`` steps (:func:`outcomes_path`)."""
    path = outcomes_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, json.dumps(dict(outcomes), sort_keys=True))


def record_outcomes(run_dir: str | Path, step: int, trajs: Sequence[Trajectory]) -> Path:
    """Write each task's success (:func:`task_outcomes`), keyed by its seed."""
    return write_outcomes(run_dir, step, task_outcomes(trajs))


def read_outcomes(run_dir: str | Path, step: int) -> dict[str, float] | None:
    """The outcomes of the evaluation after ``step`` steps, or None if it was not recorded."""
    path = outcomes_path(run_dir, step)
    return json.loads(path.read_text()) if path.exists() else None


def paired_gain(before: Sequence[float], after: Sequence[float], *, resamples: int = RESAMPLES,
                seed: int = 0) -> tuple[float, float, float]:
    """``(gain, low, high)``: mean of ``after - before`` and its 95% paired bootstrap interval.

    :func:`agentgym.evaluation.stats.paired_bootstrap`, the one the eval pages use too.

    Args:
        before: Each task's outcome (0/1, or its share of successes) before training.
        after: The same tasks' outcomes after, in the same order.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling.
    """
    return paired_bootstrap(before, after, resamples=resamples, seed=seed)


def gain_metrics(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """``heldout/*`` metrics comparing two evaluations over the tasks both scored."""
    tasks = sorted(set(before) & set(after))
    if not tasks:
        return {}
    b = [float(before[t]) for t in tasks]
    a = [float(after[t]) for t in tasks]
    gain, low, high = paired_gain(b, a)
    return {"heldout/success_before": float(np.mean(b)), "heldout/success_after": float(np.mean(a)),
            "heldout/gain": gain, "heldout/gain_low": low, "heldout/gain_high": high,
            "heldout/tasks": float(len(tasks))}


def run_gain(run_dir: str | Path, step: int) -> dict[str, float]:
    """:func:`gain_metrics` of a run's evaluation after ``step`` steps against step 0."""
    before, after = read_outcomes(run_dir, 0), read_outcomes(run_dir, step)
    if before is None or after is None or step == 0:
        return {}
    return gain_metrics(before, after)


def gain_line(row: Mapping[str, float]) -> str | None:
    """One line for people: held-out success before/after and the gain's interval."""
    if "heldout/gain" not in row:
        return None
    pts = {k: 100 * row[f"heldout/{k}"] for k in ("gain", "gain_low", "gain_high")}
    return (f"held-out success before/after: {row['heldout/success_before']:.1%} → "
            f"{row['heldout/success_after']:.1%} ({pts['gain']:+.1f} points; 95% interval "
            f"{pts['gain_low']:+.1f} to {pts['gain_high']:+.1f}, paired bootstrap over "
            f"{int(row['heldout/tasks'])} held-out tasks)")
