"""Training metrics: what a step's trajectories say, and where the numbers are written."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.evaluation.metrics import metrics_row, read_metrics, succeeded
from agentgym.files import atomic_write
from agentgym.jsonl import write_trajectories
from agentgym.types import Group, Trajectory

__all__ = ["MetricsLog", "is_zero_variance", "keep_logged_steps", "read_metrics",
           "rollout_metrics", "succeeded", "weighted_mean"]


def is_zero_variance(group: Group) -> bool:
    """Whether every scorable rollout of the group scored the same (no GRPO signal)."""
    scores = {t.outcome_reward for t in group.scorable}
    return len(scores) <= 1


def rollout_metrics(trajs: Sequence[Trajectory], groups: Sequence[Group]) -> dict[str, float]:
    """Reward, success, error/truncation rates, zero-variance groups and token counts."""
    ok = [t for t in trajs if t.scorable]
    n, n_ok = max(len(trajs), 1), max(len(ok), 1)
    steps = [s for t in ok for s in t.steps]
    return {
        "reward_mean": sum(t.outcome_reward or 0.0 for t in ok) / n_ok,
        "success_rate": sum(succeeded(t) for t in ok) / n_ok,
        "error_rate": (len(trajs) - len(ok)) / n,
        "truncation_rate": sum(t.status == "truncated" for t in ok) / n_ok,
        "zero_variance_groups": sum(is_zero_variance(g) for g in groups) / max(len(groups), 1),
        "steps_per_episode": len(steps) / n_ok,
        "invalid_step_rate": sum(not s.valid for s in steps) / max(len(steps), 1),
        "completion_tokens": float(sum(len(s.tokens.completion_ids) for s in steps if s.tokens)),
        "prompt_tokens": float(sum(len(s.tokens.prompt_ids) for s in steps if s.tokens)),
    }


def weighted_mean(stats: Iterable[tuple[Mapping[str, float | None], float]]) -> dict[str, float]:
    """Token-weighted mean of per-micro-batch stats (None entries are skipped)."""
    totals: dict[str, float] = {}
    weights: dict[str, float] = {}
    for values, weight in stats:
        for key, value in values.items():
            if value is None or not math.isfinite(value):
                continue
            totals[key] = totals.get(key, 0.0) + value * weight
            weights[key] = weights.get(key, 0.0) + weight
    return {k: totals[k] / weights[k] for k in totals if weights[k] > 0}


def keep_logged_steps(path: Path, start_step: int) -> None:
    """Cut ``metrics.jsonl`` back to the steps a run starting at ``start_step`` keeps.

    A run resumed from checkpoint N repeats the steps after N: a crash after step N + 1 was
    logged but before its checkpoint was complete (``kill -9`` mid-write) would otherwise
    leave that step in the file twice. Resuming keeps the rows of steps 0..N; a start from
    scratch (N = 0) keeps none, as the run logs its step 0 again. A row cut short by the
    crash goes too. The file is rewritten atomically, and only when something goes.
    """
    if not path.is_file():
        return
    lines = path.read_bytes().splitlines()
    kept = [line for line in lines if start_step > 0 and (row := metrics_row(line)) is not None
            and row["step"] <= start_step]
    if len(kept) != len(lines):
        atomic_write(path, b"".join(line + b"\n" for line in kept))


class MetricsLog:
    """One JSON object per step in ``metrics.jsonl``; optionally TensorBoard and W&B.

    W&B (``agentgym/trainers/wandb_log.py``) gets the same scalars, plus sample trajectories.
    """

    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb: Any = None, *,
                 start_step: int = 0, rollouts: bool = False) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        keep_logged_steps(self.path, start_step)
        self.wandb = wandb
        self.rollouts = Path(run_dir) / "rollouts" if rollouts else None
        self.writer: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional; metrics.jsonl is always written
                pass
            else:
                self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record one step's metrics."""
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        if self.wandb is not None:
            self.wandb.log(step, metrics)

    def trajectories(self, step: int, trajs: Sequence[Trajectory]) -> None:
        """Record the trajectories of the step logged as ``step``.

        W&B gets its ``trajectories`` table; with ``logging.rollouts`` all of them go to
        ``rollouts/step-NNNNNN.jsonl``.
        """
        if self.wandb is not None:
            self.wandb.trajectories(step, trajs)
        if self.rollouts is not None:  # written whole, then moved into place
            write_trajectories(self.rollouts / f"step-{step:06d}.jsonl", trajs)

    def close(self) -> None:
        """Close TensorBoard files and finish the W&B run."""
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.close()
