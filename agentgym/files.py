"""Files the commands write: atomically, and never over one of their own inputs.

Every output is written to a temporary file in the target's folder and moved into place with
``os.replace`` (atomic on POSIX), so a reader never sees half a file and a crash leaves the
previous version intact. Before writing, a command checks that its output is none of its
inputs (the same path, a symlink to it, or a hard link), which would destroy the input.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file (after symlinks; hard links count too)."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


def refuse_overwrite(out: str | os.PathLike[str],
                     inputs: Iterable[str | os.PathLike[str] | None], option: str) -> None:
    """Raise when ``out`` is one of ``inputs``.

    Args:
        out: The file a command is about to write.
        inputs: The files it reads (``None`` entries are ignored).
        option: The command-line option that names ``out``, for the fix in the message.

    Raises:
        ConfigError: ``out`` names an input.
    """
    for source in inputs:
        if source is not None and same_file(out, source):
            raise ConfigError(f"{option} {str(out)!r} is also an input of this command; "
                              f"writing it would destroy that input. Pass another {option} "
                              "path")


def atomic_write(path: str | os.PathLike[str], data: str | bytes,
                 encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    Returns:
        The path written.

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "page.html"
        >>> atomic_write(target, "<p>hi</p>").read_text()
        '<p>hi</p>'
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a directory; expected a file path to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = data.encode(encoding) if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def yaml_error_message(exc: Any, source: str | os.PathLike[str] | None = None) -> str:
    """One line for a ``yaml.YAMLError``: where it is, what is wrong, how to look for the fix."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = str(source) if source is not None else (
        getattr(mark, "name", None) or "the YAML input")
    if where.startswith("<"):
        where = "the YAML input"
    at = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
    problem = " ".join(str(p) for p in (getattr(exc, "context", None),
                                        getattr(exc, "problem", None)) if p) or str(exc)
    return (f"{where}:{at} not valid YAML ({problem}); expected a YAML mapping: check that "
            "every key at one level is indented by the same number of spaces, that brackets "
            "and quotes are closed, and that no tab is used for indentation")
