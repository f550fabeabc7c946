"""Evaluation metrics over trajectories: per suite entry and overall.

Error trajectories (infrastructure faults) are counted in ``error_rate`` and left out of
every score: they are never a failure. Success is the env's ``success`` flag on the last
step, else a positive outcome reward (:func:`succeeded`, the one rule every count uses).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import SchemaError
from agentgym.evaluation.passk import mean_avg_at_k, mean_pass_at_k
from agentgym.types import Trajectory

KEY_SEP = "|"
"""Separates the entry label from the seed in an eval trajectory's ``group_id``."""


def succeeded(traj: Trajectory) -> bool:
    """Whether an episode succeeded: the one rule every count of successes uses.

    The env's ``success`` flag on the last step when it reports one, else a positive outcome
    reward (the trajectory's own, or the shared rule's when it has none:
    :meth:`agentgym.types.Trajectory.with_outcome`). Evaluation, held-out and training
    metrics, ``agentgym rollout``'s summary, RFT's keep rule and the benchmarks count with it.
    An error trajectory never succeeded.
    """
    if not traj.scorable:
        return False
    if traj.steps and "success" in traj.steps[-1].result.info:
        return bool(traj.steps[-1].result.info["success"])
    return (traj.with_outcome().outcome_reward or 0.0) > 0


def group_id(label: str, seed: int) -> str:
    """The ``group_id`` of the rollouts of one task of one suite entry."""
    return f"{label}{KEY_SEP}{seed}"


def entry_of(traj: Trajectory) -> str:
    """The suite entry label a trajectory belongs to (its ``group_id`` before the seed)."""
    label, sep, _ = traj.group_id.rpartition(KEY_SEP)
    return label if sep else (traj.env_id or "?")


def episode_key(traj: Trajectory) -> tuple[str, int, int]:
    """``(entry label, seed, rollout index)``: what a resumed eval matches results on."""
    return entry_of(traj), int(traj.seed or 0), int(traj.metrics.get("rollout", 0))


def summarize(trajs: Sequence[Trajectory], k: int = 1) -> dict[str, Any]:
    """Metrics of a set of episodes.

    Args:
        trajs: The episodes (error ones included: they are counted, not scored).
        k: The k of pass@k and avg@k (pass@1 is always reported too).

    Returns:
        A flat dict: ``episodes``, ``errors``, ``error_rate``, ``tasks``, ``success_rate``,
        ``successes``, ``mean_reward``, ``pass@1``, ``pass@k``, ``avg@k``, ``pass@k_tasks``
        (tasks with >= k scorable rollouts), ``steps_per_episode``,
        ``completion_tokens_per_episode``, ``prompt_tokens_per_episode``,
        ``invalid_action_rate``, ``wall_s_per_episode``. Rates over no episode are None.
    """
    ok = [t for t in trajs if t.scorable]
    steps = [s for t in ok for s in t.steps]
    per_task: dict[str, list[bool]] = defaultdict(list)
    for t in ok:
        per_task[t.group_id].append(succeeded(t))
    counts = [(len(v), sum(v)) for v in per_task.values()]
    pass1, _ = mean_pass_at_k(counts, 1)
    passk, used = mean_pass_at_k(counts, k)
    avgk, _ = mean_avg_at_k(counts, k)

    def per_ok(total: float) -> float | None:
        return total / len(ok) if ok else None

    successes = sum(succeeded(t) for t in ok)
    return {
        "episodes": len(trajs),
        "errors": len(trajs) - len(ok),
        "error_rate": (len(trajs) - len(ok)) / len(trajs) if trajs else None,
        "tasks": len({t.group_id for t in trajs}),
        "successes": successes,
        "success_rate": per_ok(successes),
        "mean_reward": per_ok(sum(t.outcome_reward or 0.0 for t in ok)),
        "pass@1": pass1,
        f"pass@{k}": passk,
        f"avg@{k}": avgk,
        f"pass@{k}_tasks": used,
        "steps_per_episode": per_ok(len(steps)),
        "completion_tokens_per_episode": per_ok(
            sum(len(s.tokens.completion_ids) for s in steps if s.tokens)),
        "prompt_tokens_per_episode": per_ok(
            sum(len(s.tokens.prompt_ids) for s in steps if s.tokens)),
        "invalid_action_rate": sum(not s.valid for s in steps) / len(steps) if steps else None,
        "wall_s_per_episode": (sum(t.metrics.get("wall_s", 0.0) for t in trajs) / len(trajs)
                               if trajs else None),
    }


def summarize_by_entry(trajs: Sequence[Trajectory], labels: Sequence[str], k: int = 1
                       ) -> dict[str, dict[str, Any]]:
    """:func:`summarize` per suite entry (in ``labels`` order) plus ``"overall"`` (pooled)."""
    by_entry: dict[str, list[Trajectory]] = {label: [] for label in labels}
    for t in trajs:
        by_entry.setdefault(entry_of(t), []).append(t)
    out = {label: summarize(ts, k) for label, ts in by_entry.items()}
    out["overall"] = summarize(trajs, k)
    return out


MEAN_OF_ENTRIES = "mean of entries (unweighted)"
"""Row label of :func:`entry_mean` in reports."""


def entry_mean(metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The unweighted mean over suite entries of pass@1 and success rate.

    Each entry counts once whatever its size, as benchmarks such as BFCL average their
    categories; the pooled ``"overall"`` row weighs entries by their episodes instead.

    Args:
        metrics: Per-entry metrics plus ``"overall"`` (:func:`summarize_by_entry`).

    Returns:
        ``{"entries", "pass@1", "success_rate", "unscored"}`` (``unscored``: entries left out
        because every episode errored), or None when fewer than two entries were scored.
    """
    rows = {k: m for k, m in metrics.items() if k != "overall"}
    scored = [m for m in rows.values() if m.get("pass@1") is not None]
    if len(scored) < 2:
        return None
    return {"entries": len(scored),
            "pass@1": sum(float(m["pass@1"]) for m in scored) / len(scored),
            "success_rate": sum(float(m["success_rate"]) for m in scored) / len(scored),
            "unscored": len(rows) - len(scored)}


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    """Every logged step of a training run (its ``metrics.jsonl``), in order.

    The file is written by the trainer's metrics log; reading it lives here so that reports
    and the CLI can plot a run without importing the trainer. A last line cut short (the run
    was killed while writing it) is left out; the next start of the run drops it too.

    Raises:
        SchemaError: A line before the last is not a JSON object with an integer ``step``
            (the file is damaged or not a run's), naming the file and the line.
    """
    path = Path(run_dir) / "metrics.jsonl"
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = metrics_row(line)
        if row is None:
            if number == len(lines):  # no newline after it: cut short by a crash
                break
            raise SchemaError(f"{path}:{number}: not a metrics row (expected a JSON object "
                              "with an integer step, as agentgym train writes); the file is "
                              "damaged or not a training run's")
        rows.append(row)
    return rows


def metrics_row(line: bytes | str) -> dict[str, Any] | None:
    """One ``metrics.jsonl`` line as a dict, or None if it is not a row a run wrote."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or absurdly deep
        return None
    if not isinstance(row, dict) or type(row.get("step")) is not int:
        return None
    return row
