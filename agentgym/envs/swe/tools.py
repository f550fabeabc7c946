"""The SWE agent's tools: ``bash``, a file ``editor`` and ``submit``, over one sandbox.

The tools receive the episode's :class:`Workspace` (the ToolBox injects it as ``state``).
Agent mistakes (a missing file, an ``old_str`` that is not unique, a command that ran past
its timeout) raise ordinary exceptions, which the ToolBox turns into observations with
``valid=False``. A fault of the sandbox itself is kept in ``Workspace.fault`` and re-raised
by the env after the turn, because the ToolBox would otherwise show it to the model as if
the agent had erred.

The editor follows the SWE-agent / Anthropic text-editor tool: ``view`` (numbered lines, or
a directory listing), ``create``, ``str_replace`` (the old text must occur exactly once),
``insert`` (after a line number) and ``undo_edit`` (per file, back through every edit).
Paths are relative to the repository root; absolute paths must lie inside it. Commands the
tools run name paths relative to the repository, so they work in the local sandbox too.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.sandboxes.base import ExecResult, Sandbox, SandboxError

MAX_VIEW_BYTES = 400_000
SNIPPET_LINES = 4


class CommandTimeout(Exception):
    """A command ran past its timeout (its processes were killed)."""


@dataclass
class Workspace:
    """The state of one episode that the tools share."""

    sandbox: Sandbox
    workdir: str
    command_timeout: float
    max_output_chars: int
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables for every command (the task's)."""
    history: dict[str, list[bytes | None]] = field(default_factory=dict)
    """Earlier contents per edited file (``None``: it did not exist), for ``undo_edit``."""
    submitted: bool = False
    patch: str | None = None
    """The diff captured by ``submit``."""
    fault: SandboxError | None = None
    """An infrastructure fault raised inside a tool, re-raised by the env."""

    async def guarded(self, op: Callable[[], Awaitable[Any]]) -> Any:
        """Run a sandbox operation, recording a sandbox fault before re-raising it."""
        try:
            return await op()
        except SandboxError as exc:
            self.fault = exc
            raise

    async def run(self, cmd: str) -> ExecResult:
        """Run a command at the repository root."""
        return await self.guarded(lambda: self.sandbox.exec(
            cmd, timeout=self.command_timeout, workdir=self.workdir,
            env=dict(self.env)))

    def resolve(self, path: str) -> tuple[str, str]:
        """(absolute sandbox path, path relative to the repository) of a tool's ``path``."""
        full = posixpath.normpath(posixpath.join(self.workdir, path.strip()))
        if full != self.workdir and not full.startswith(self.workdir.rstrip("/") + "/"):
            raise ValueError(f"{path!r} is outside the repository; use a path relative to "
                             f"the repository root ({self.workdir})")
        rel = posixpath.relpath(full, self.workdir)
        if rel == ".git" or rel.startswith(".git/"):
            raise ValueError("the editor does not edit git's own files; use bash for git")
        return full, rel

    def check_open(self) -> None:
        """Refuse tool calls after ``submit`` (they would change what was judged)."""
        if self.submitted:
            raise RuntimeError("the work was already submitted; this call was not run")

    def clip(self, text: str) -> str:
        """Keep the head and the (usually more telling) tail of long output."""
        limit = self.max_output_chars
        if len(text) <= limit:
            return text
        head, tail = limit // 4, limit - limit // 4
        return (f"{text[:head]}\n…[{len(text) - head - tail} characters cut]…\n"
                f"{text[-tail:]}")


async def bash(command: str, state: Workspace) -> str:
    """Run a bash command at the repository root and return its output and exit code.

    Each call is a fresh shell (``cd`` and variables do not carry over); long-running or
    interactive commands are killed at the time limit.

    Args:
        command: The command, e.g. "grep -rn 'def parse' src" or "python -m pytest -q tests".
        state: The episode workspace (filled in by the ToolBox).
    """
    state.check_open()
    result = await state.run(command)
    if result.timed_out:
        raise CommandTimeout(f"the command ran past {state.command_timeout:g} s and was "
                             "killed; run something faster or narrower")
    text = result.stdout + (("\n" if result.stdout and not result.stdout.endswith("\n") else "")
                            + result.stderr if result.stderr else "")
    return state.clip(text) + f"\n[exit code {result.exit_code}]"


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{n:6}\t{line.rstrip(chr(10))}" for n, line in enumerate(lines, first))


async def _read_text(state: Workspace, full: str, rel: str) -> str | None:
    """The file's text, ``None`` when it does not exist; ValueError for unreadable files."""
    try:
        data: bytes = await state.guarded(lambda: state.sandbox.read_file(full))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ValueError(f"{rel} is a directory") from None
    if len(data) > MAX_VIEW_BYTES:
        raise ValueError(f"{rel} is {len(data)} bytes, too large for the editor; use bash "
                         "(grep, sed -n) to read parts of it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{rel} is not UTF-8 text; use bash for binary files") from None


async def _write(state: Workspace, full: str, rel: str, old: str | None, new: str) -> None:
    await state.guarded(lambda: state.sandbox.write_file(full, new))
    state.history.setdefault(rel, []).append(None if old is None else old.encode("utf-8"))


def _snippet(text: str, line: int, rel: str) -> str:
    lines = text.splitlines()
    lo, hi = max(0, line - SNIPPET_LINES), min(len(lines), line + SNIPPET_LINES + 1)
    return f"edited {rel}; lines {lo + 1}-{hi} now read:\n" + _numbered(lines[lo:hi], lo + 1)


async def editor(command: Literal["view", "create", "str_replace", "insert", "undo_edit"],
                 path: str, state: Workspace, file_text: str | None = None,
                 old_str: str | None = None, new_str: str | None = None,
                 insert_line: int | None = None, view_range: list[int] | None = None) -> str:
    """View, create and edit files in the repository.

    view: a file with line numbers (optionally only view_range [first, last], last -1 for
    the end) or a directory's files two levels deep. create: a new file with file_text.
    str_replace: replace old_str, which must occur exactly once, by new_str. insert: put
    new_str after line insert_line (0 for the top). undo_edit: revert the last edit of path.

    Args:
        command: One of view, create, str_replace, insert, undo_edit.
        path: File or directory, relative to the repository root, e.g. "src/app/util.py".
        state: The episode workspace (filled in by the ToolBox).
        file_text: Content of the new file (create).
        old_str: Exact text to replace, with enough context to be unique (str_replace).
        new_str: Replacement text (str_replace) or text to insert (insert).
        insert_line: Line number after which to insert (insert).
        view_range: [first, last] line numbers to show, from 1 (view).
    """
    state.check_open()
    full, rel = state.resolve(path)
    if command == "view":
        return await _view(state, full, rel, view_range)
    if command == "undo_edit":
        stack = state.history.get(rel)
        if not stack:
            raise ValueError(f"no edit of {rel} to undo")
        previous = stack.pop()
        if previous is None:
            await state.run(f"rm -f -- {shlex.quote(rel)}")
            return f"undid the creation of {rel} (removed)"
        await state.guarded(lambda: state.sandbox.write_file(full, previous))
        return f"undid the last edit of {rel}"
    old = await _read_text(state, full, rel)
    if command == "create":
        if file_text is None:
            raise ValueError("create needs file_text")
        if old is not None:
            raise ValueError(f"{rel} already exists; use str_replace or insert to change it")
        await _write(state, full, rel, None, file_text)
        return f"created {rel} ({len(file_text.splitlines())} lines)"
    if old is None:
        raise ValueError(f"{rel} does not exist; view the directory to find the file, or "
                         "create it")
    if command == "str_replace":
        if old_str is None or new_str is None:
            raise ValueError("str_replace needs old_str and new_str")
        count = old.count(old_str) if old_str else 0
        if count != 1:
            lines = sorted({old[:i].count("\n") + 1 for i in _find_all(old, old_str)})
            where = "" if count == 0 else f" (lines {', '.join(map(str, lines[:8]))})"
            raise ValueError(
                f"old_str must occur exactly once in {rel}, found {count} times{where}; "
                + ("view the file and copy the text exactly (whitespace matters)" if count == 0
                   else "include more surrounding lines to make it unique"))
        at = old.index(old_str)
        new = old[:at] + new_str + old[at + len(old_str):]
        await _write(state, full, rel, old, new)
        return _snippet(new, old[:at].count("\n"), rel)
    # insert
    if new_str is None or insert_line is None:
        raise ValueError("insert needs new_str and insert_line")
    lines = old.splitlines(keepends=True)
    if not 0 <= insert_line <= len(lines):
        raise ValueError(f"insert_line must be between 0 and {len(lines)} for {rel}, got "
                         f"{insert_line}")
    if lines and not lines[-1].endswith("\n") and insert_line == len(lines):
        lines[-1] += "\n"
    new = "".join(lines[:insert_line]) + new_str + ("" if new_str.endswith("\n") else "\n") \
        + "".join(lines[insert_line:])
    await _write(state, full, rel, old, new)
    return _snippet(new, insert_line, rel)


async def _view(state: Workspace, full: str, rel: str, view_range: list[int] | None) -> str:
    listing = await state.run(
        f"test -d {shlex.quote(rel)} && find {shlex.quote(rel)} -maxdepth 2 "
        "-not -path '*/.*' -not -name '__pycache__' | sort")
    if listing.ok:
        return f"files in {rel} (two levels deep):\n{state.clip(listing.stdout)}"
    text = await _read_text(state, full, rel)
    if text is None:
        raise ValueError(f"{rel} does not exist")
    lines = text.splitlines()
    first, last = 1, len(lines)
    if view_range is not None:
        if len(view_range) != 2:
            raise ValueError(f"view_range must be [first, last], got {view_range}")
        first, last = view_range[0], len(lines) if view_range[1] == -1 else view_range[1]
        if not 1 <= first <= max(last, 1) or last > len(lines):
            raise ValueError(f"view_range {view_range} is outside 1..{len(lines)} of {rel}")
    return state.clip(_numbered(lines[first - 1:last], first) or f"({rel} is empty)")


def _find_all(text: str, sub: str) -> list[int]:
    out, at = [], text.find(sub)
    while at != -1:
        out.append(at)
        at = text.find(sub, at + 1)
    return out


async def submit(state: Workspace) -> str:
    """Submit the current changes to the repository as the fix; this ends the episode.

    Args:
        state: The episode workspace (filled in by the ToolBox).
    """
    state.check_open()
    state.patch = await state.guarded(lambda: state.sandbox.diff(state.workdir))
    state.submitted = True
    return "submitted; the tests will now be run"
