"""Trajectory JSONL files: one trajectory a line, each with its schema version."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from agentgym.errors import SchemaError
from agentgym.types import Trajectory


def read_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file; a bad line raises naming its line number."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no trajectory file at {str(path)!r}")
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield Trajectory.from_json(line)
            except (SchemaError, TypeError, ValueError) as exc:
                raise SchemaError(f"{path}:{number}: {exc}") from exc


def write_trajectories(path: str | os.PathLike[str], trajectories: Iterable[Trajectory],
                       append: bool = False) -> int:
    """Write trajectories as JSONL; returns how many were written."""
    with TrajectoryWriter(path, append=append) as writer:
        for traj in trajectories:
            writer.write(traj)
        return writer.count


class TrajectoryWriter:
    """Streams trajectories to a JSONL file, one flushed line each, as they finish."""

    def __init__(self, path: str | os.PathLike[str], append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = self.path.open("a" if append else "w", encoding="utf-8")
        self.count = 0

    def write(self, traj: Trajectory) -> None:
        """Append one trajectory and flush, so a crash loses at most the line being written."""
        self._file.write(traj.to_json() + "\n")
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
