"""Trajectory JSONL files: one trajectory a line, each with its schema version.

Reading is strict and never ends in a traceback: a binary or non-UTF-8 file, JSON nested
deeper than the parser's stack, a number too long to convert, or a ``NaN``/``Infinity``
(which is not JSON) each raise :class:`~agentgym.errors.SchemaError` naming the file, the line
and what was expected. Writing goes to a ``.partial`` file that replaces the target only when
it is complete, so a crash never leaves a half-written file under the name a reader expects.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from agentgym.errors import ConfigError, SchemaError
from agentgym.types import Trajectory

EXPECTED = "expected JSON lines as `agentgym rollout` or `agentgym eval` write them"


def _refuse_constant(name: str) -> float:
    raise SchemaError(f"{name} is not a JSON number (rewards and metrics must be finite)")


def loads_strict(text: str) -> Any:
    """Parse JSON text; every way it can fail raises :class:`SchemaError`.

    Example:
        >>> loads_strict('{"reward": 1.0}')
        {'reward': 1.0}
    """
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise SchemaError("JSON nested too deeply to read (over ~1,000 levels)") from None
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not valid JSON: {exc}") from None
    except SchemaError:
        raise
    except ValueError:  # an integer past Python's digit limit
        raise SchemaError(f"a number too long to read (over {sys.get_int_max_str_digits():,} "
                          "digits)") from None


def json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, value)`` for each non-blank line of a JSONL file.

    Raises:
        FileNotFoundError: No file at ``path``.
        ConfigError: ``path`` is a directory.
        SchemaError: A line that is not UTF-8 or not strict JSON, naming file and line.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a directory; {EXPECTED} (a .jsonl file)")
    if not path.exists():
        raise FileNotFoundError(f"no such file: {str(path)!r}; {EXPECTED}")
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SchemaError(
                    f"{path}:{number}: not UTF-8 text (byte {raw[exc.start]:#04x} at column "
                    f"{exc.start + 1}); {EXPECTED} — is this a binary file?") from None
            if not line.strip():
                continue
            try:
                yield number, loads_strict(line)
            except SchemaError as exc:
                raise SchemaError(f"{path}:{number}: {exc}; {EXPECTED}") from None


def read_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file; a bad line raises naming its line number."""
    for number, data in json_lines(path):
        try:
            yield Trajectory.from_dict(data)
        except (SchemaError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise SchemaError(f"{path}:{number}: {exc}") from exc


def write_trajectories(path: str | os.PathLike[str], trajectories: Iterable[Trajectory],
                       append: bool = False) -> int:
    """Write trajectories as JSONL; returns how many were written."""
    with TrajectoryWriter(path, append=append) as writer:
        for traj in trajectories:
            writer.write(traj)
        return writer.count


class TrajectoryWriter:
    """Streams trajectories to a JSONL file, one flushed line each, as they finish.

    A new file is written as ``<path>.partial`` and moved over ``path`` on ``close``: until
    then an older file at ``path`` is intact, and after a crash the finished episodes are in
    the ``.partial`` file. ``append=True`` adds lines to ``path`` itself (a resumed run).
    """

    def __init__(self, path: str | os.PathLike[str], append: bool = False) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise ConfigError(f"{str(self.path)!r} is a directory; expected a .jsonl file path "
                              "to write trajectories to")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._target = self.path if append else self.path.with_name(self.path.name + ".partial")
        self._file: IO[str] = self._target.open("a" if append else "w", encoding="utf-8")
        self.count = 0

    def write(self, traj: Trajectory) -> None:
        """Append one trajectory and flush, so a crash loses at most the line being written."""
        self._file.write(traj.to_json() + "\n")
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        """Close the file and move it into place (idempotent)."""
        if self._file.closed:
            return
        self._file.close()
        if self._target != self.path:
            os.replace(self._target, self.path)

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
