"""The results file of an eval: trajectory JSONL appended as episodes finish, resumable.

Each line is one trajectory (the ordinary schema, so ``agentgym view`` and
``agentgym advantages`` read it too). Its ``group_id`` is ``"<entry label>|<seed>"`` and
``metrics["rollout"]`` its rollout index: together the key a resumed eval matches on. When a
key appears twice (an error episode run again), the last line wins.

A line that does not parse is either *truncated* (the last line, no newline after it: the
run stopped mid-write) or *corrupt*; :func:`load_results` reports each one, and
:func:`repair_results` keeps the valid lines and moves the original aside.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentgym.errors import SchemaError
from agentgym.evaluation.metrics import episode_key
from agentgym.types import Trajectory

RESULTS_FILE = "results.jsonl"


@dataclass(frozen=True)
class LoadedResults:
    """What a results file holds.

    Attributes:
        trajectories: The latest trajectory per key, in file order.
        problems: One line per unreadable line (``"line 7: truncated ..."``).
        valid_lines: The raw valid lines, for rewriting the file without the bad ones.
    """

    trajectories: tuple[Trajectory, ...]
    problems: tuple[str, ...]
    valid_lines: tuple[str, ...]


def load_results(path: str | os.PathLike[str]) -> LoadedResults:
    """Read a results file, tolerating truncated and corrupt lines (reported, skipped)."""
    path = Path(path)
    if not path.exists():
        return LoadedResults((), (), ())
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    latest: dict[tuple[str, int, int], Trajectory] = {}
    problems, valid = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
            traj = Trajectory.from_json(text)
        except (UnicodeDecodeError, SchemaError, ValueError, TypeError, KeyError) as exc:
            kind = ("truncated (the run stopped while writing it)" if number == len(lines)
                    else "corrupt")
            problems.append(f"line {number}: {kind}: {str(exc)[:120]}")
            continue
        latest.pop(episode_key(traj), None)  # re-insert: the last line wins, in file order
        latest[episode_key(traj)] = traj
        valid.append(text)
    return LoadedResults(tuple(latest.values()), tuple(problems), tuple(valid))


def repair_results(path: str | os.PathLike[str], loaded: LoadedResults) -> Path | None:
    """Rewrite ``path`` with only its valid lines; the original goes to ``<path>.bad``.

    Returns:
        Where the original was moved, or None when there was nothing to repair.
    """
    path = Path(path)
    if not loaded.problems:
        return None
    backup = path.with_name(path.name + ".bad")
    n = 1
    while backup.exists():
        n += 1
        backup = path.with_name(f"{path.name}.bad{n}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in loaded.valid_lines), encoding="utf-8")
    os.replace(path, backup)
    os.replace(tmp, path)
    return backup
