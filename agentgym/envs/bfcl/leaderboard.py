"""BFCL accuracies of an ``agentgym eval`` run, under the leaderboard's names, and their mean.

Run ``python -m agentgym.envs.bfcl.leaderboard runs/eval/bfcl-smollm2`` (a results folder or
its ``results.json``) after ``agentgym eval --suite bfcl ...``; for a run stopped before its
report, the episodes in the folder's ``results.jsonl`` are summarized. Entries are matched by their
suite labels, which are the leaderboard's column names (``Non-Live Python Simple AST``,
``Multi Turn Base``, ...); accuracy is pass@1 over the category's entries (episodes that
ended in error are left out and counted, as in every eval report).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentgym.envs.bfcl.data import CATEGORIES

MEAN_LABEL = "Unweighted mean"


def bfcl_accuracies(results: Mapping[str, Any]) -> dict[str, float]:
    """Per-category accuracy (label -> pass@1) in the family's order, then the mean.

    Args:
        results: The ``results.json`` content of an eval run.

    Returns:
        ``{label: accuracy}`` for every BFCL category the run has, plus :data:`MEAN_LABEL`
        (their unweighted mean) when there is at least one.
    """
    metrics = results.get("metrics", {})
    out = {c.label: float(metrics[c.label]["pass@1"]) for c in CATEGORIES.values()
           if c.label in metrics and metrics[c.label].get("pass@1") is not None}
    if out:
        out[MEAN_LABEL] = sum(out.values()) / len(out)
    return out


def markdown(results: Mapping[str, Any]) -> str:
    """The accuracies as a markdown table (95% Wilson interval, episode and error counts)."""
    from agentgym.evaluation.report import wilson

    metrics = results.get("metrics", {})
    lines = ["| BFCL category | accuracy | 95% interval | entries | errors |",
             "|---|---|---|---|---|"]
    for label, acc in bfcl_accuracies(results).items():
        m = metrics.get(label, {})
        interval = ""
        if "successes" in m and "episodes" in m:
            lo, hi = wilson(m["successes"], m["episodes"] - m.get("errors", 0))
            interval = f"{lo:.0%} to {hi:.0%}"
        lines.append(f"| {'**' + label + '**' if label == MEAN_LABEL else label} | "
                     f"{acc:.1%} | {interval} | {m.get('episodes', '')} | "
                     f"{m.get('errors', '')} |")
    return "\n".join(lines)


def partial_results(jsonl: Path) -> dict[str, Any]:
    """Metrics of the episodes in an eval's ``results.jsonl`` (for a run stopped early)."""
    from agentgym.evaluation.metrics import entry_of, summarize_by_entry
    from agentgym.evaluation.results import load_results

    trajs = load_results(jsonl).trajectories
    return {"metrics": summarize_by_entry(trajs, sorted({entry_of(t) for t in trajs}))}


def main(argv: list[str] | None = None) -> int:
    """Print the table for a results folder or file given on the command line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m agentgym.envs.bfcl.leaderboard RESULTS_DIR_OR_JSON",
              file=sys.stderr)
        return 2
    path = Path(args[0])
    if path.is_dir() and not (path / "results.json").exists() and \
            (path / "results.jsonl").exists():
        results = partial_results(path / "results.jsonl")  # a run stopped before its report
        path = path / "results.jsonl"
    else:
        path = path / "results.json" if path.is_dir() else path
        if not path.exists():
            print(f"no results file at {path}; run `agentgym eval --suite bfcl ...` first",
                  file=sys.stderr)
            return 2
        results = json.loads(path.read_text(encoding="utf-8"))
    if not bfcl_accuracies(results):
        print(f"{path} has no BFCL categories (its entries: {sorted(results.get('metrics', {}))})",
              file=sys.stderr)
        return 1
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
