"""What BFCL's checker said about each entry of one or more eval runs, per category.

Accuracy says how often a model is right; the checker's error types say how it is wrong
(``type_error:simple``: an argument of the wrong type, ``parallel_function_checker_no_order:
wrong_count``: one call where several were asked, ...), which is what a change to the
training data can act on. Run it on ``agentgym eval --suite bfcl...`` folders (or their
``results.jsonl``); several runs are counted side by side:

    python -m agentgym.envs.bfcl.errors runs/eval/bfcl_nonlive-sft runs/eval/bfcl_nonlive-rl

An entry BFCL accepted counts as ``correct``; an episode that ended in an infrastructure
error (no verdict) as ``episode error``; each other entry under the checker's own
``error_type``, as the env recorded it in the last step's ``info["bfcl"]``.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from agentgym.envs.bfcl.data import CATEGORIES
from agentgym.evaluation.results import RESULTS_FILE, load_results
from agentgym.types import Trajectory

CORRECT = "correct"
EPISODE_ERROR = "episode error"
NO_VERDICT = "no verdict"


def verdict(traj: Trajectory) -> tuple[str, str]:
    """``(category, verdict)`` of one BFCL episode (see the module's docstring)."""
    category = traj.task_id.rsplit("_", 1)[0]
    if traj.status == "error" or not traj.steps:
        return category, EPISODE_ERROR
    info = traj.steps[-1].result.info
    category = str(info.get("category", category))
    bfcl = info.get("bfcl") or {}
    if bfcl.get("passed"):
        return category, CORRECT
    return category, str(bfcl.get("error_type") or NO_VERDICT)


def count_verdicts(trajs: tuple[Trajectory, ...]) -> Counter[tuple[str, str]]:
    """``(category, verdict) -> episodes`` over a run's episodes."""
    return Counter(verdict(t) for t in trajs)


def markdown(runs: dict[str, Counter[tuple[str, str]]]) -> str:
    """One row per category and verdict (correct first, then by total count), a column a run."""
    names = list(runs)
    lines = ["| BFCL category | verdict | " + " | ".join(names) + " |",
             "|---|---|" + "---:|" * len(names)]
    keys = {k for counts in runs.values() for k in counts}
    order = [c for c in CATEGORIES if any(k[0] == c for k in keys)]
    order += sorted({k[0] for k in keys} - set(order))
    for category in order:
        label = CATEGORIES[category].label if category in CATEGORIES else category
        verdicts = {v for c, v in keys if c == category}
        total = {v: sum(runs[n][(category, v)] for n in names) for v in verdicts}
        for v in sorted(verdicts, key=lambda v: (v != CORRECT, -total[v], v)):
            cells = " | ".join(str(runs[n][(category, v)]) for n in names)
            lines.append(f"| {label} | {v} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table for the eval folders (or ``results.jsonl`` files) given."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m agentgym.envs.bfcl.errors RUN_DIR_OR_JSONL [MORE ...]",
              file=sys.stderr)
        return 2
    runs: dict[str, Counter[tuple[str, str]]] = {}
    for arg in args:
        path = Path(arg)
        jsonl = path / RESULTS_FILE if path.is_dir() else path
        if not jsonl.exists():
            print(f"no {RESULTS_FILE} at {jsonl}; run `agentgym eval --suite bfcl ...` first",
                  file=sys.stderr)
            return 2
        loaded = load_results(jsonl)
        for problem in loaded.problems:
            print(f"{jsonl}: {problem}", file=sys.stderr)
        name = path.name if path.is_dir() else path.parent.name
        runs[name if name not in runs else str(path)] = count_verdicts(loaded.trajectories)
    print(markdown(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
