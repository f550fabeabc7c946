"""A local process sandbox: the Sandbox contract on subprocesses in a temporary directory.

For development on machines without Docker (:class:`~agentgym.sandboxes.base.Sandbox`).

**This is NOT an isolation boundary.** Commands run as the calling user, on the host's
filesystem and network, with the host's programs. A command can read your files and reach the
network; it outlives its call only in that we kill its process group. Use it to develop and
test envs; train on untrusted model output only in the Docker sandbox
(``agentgym.sandboxes.docker``).

What it does provide, so envs behave the same as in a container:

- **A private root.** Sandbox paths are absolute POSIX paths (``/testbed/app.py``) mapped
  under a fresh temporary directory (``<root>/testbed/app.py``); ``..`` cannot climb out of
  the root. Commands run with ``cwd`` at the mapped ``workdir`` and ``HOME``/``TMPDIR``
  inside the root, but a command that names an absolute host path reaches the host path:
  envs should tell the model to use paths relative to its working directory.
- **Timeouts that kill the whole process group** (the command runs in a new session), so
  ``sleep 100 &`` or a runaway test does not outlive its call; a process that leaves the
  group (``setsid``) dies too, found by the mark in its environment
  (:func:`agentgym.watchdog.new_mark`) unless it cleared its environment; ``aclose`` kills
  whatever is left and removes the root. A process killed outright (SIGKILL, the OOM
  killer) takes its running commands' groups and marked processes with it through
  :func:`agentgym.watchdog.shared_watchdog`; its roots, named after it, go when the next
  local sandbox on the machine starts
  (:func:`agentgym.scratch.scratch_dir`).
- **Output caps**: each of stdout and stderr keeps its first ``max_output_bytes`` bytes; the
  rest is read and dropped so a chatty command cannot fill memory.
- **Resource limits** (``setrlimit`` in the child): address space, file size, CPU seconds
  and core dumps. They bound honest mistakes (a memory hog, a runaway write), not attacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import posixpath
import resource
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from agentgym.errors import ConfigError
from agentgym.sandboxes.base import ExecResult, SandboxError, git_diff
from agentgym.scratch import scratch_dir
from agentgym.watchdog import MARK_VARIABLE, kill_marked, new_mark, shared_watchdog

# A fixed author and date make commits (and so diffs and state keys) reproducible.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "agentgym", "GIT_AUTHOR_EMAIL": "agentgym@localhost",
    "GIT_COMMITTER_NAME": "agentgym", "GIT_COMMITTER_EMAIL": "agentgym@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}

@dataclass(frozen=True)
class LocalLimits:
    """Per-command resource limits (``setrlimit``; ``None`` leaves the host's limit)."""

    memory_bytes: int | None = 4 * 2**30
    """RLIMIT_AS: address space per process."""
    file_bytes: int | None = 256 * 2**20
    """RLIMIT_FSIZE: largest file a process may write (a bigger write fails with EFBIG)."""
    cpu_seconds: int | None = 600
    """RLIMIT_CPU: CPU seconds per process (wall-clock timeouts are separate)."""


class LocalSandbox:
    """Subprocesses in a temporary directory; see the module docstring (not isolation!).

    Args:
        workdir: Default working directory for ``exec`` (a sandbox path), created at start.
        max_output_bytes: Cap on each of stdout and stderr per command.
        limits: Resource limits applied to every command.
        root: Host directory to use as the root (default: a new temporary directory, removed
            by ``aclose``; a given root is left in place).

    Example:
        >>> import asyncio
        >>> async def main():
        ...     async with LocalSandbox() as box:
        ...         await box.write_file("/testbed/a.txt", "hi")
        ...         return (await box.exec("cat a.txt")).stdout
        >>> asyncio.run(main())
        'hi'
    """

    def __init__(self, *, workdir: str = "/testbed", max_output_bytes: int = 1_000_000,
                 limits: LocalLimits = LocalLimits(), root: str | None = None) -> None:
        if not posixpath.isabs(workdir):
            raise ConfigError(f"workdir must be an absolute sandbox path, got {workdir!r}")
        if max_output_bytes < 1:
            raise ConfigError(f"max_output_bytes must be >= 1, got {max_output_bytes}")
        self._own_root = root is None
        self.root = scratch_dir("agentgym-sbx-") if root is None else Path(root)
        self.workdir = workdir
        self.max_output_bytes = max_output_bytes
        self.limits = limits
        self._groups: dict[int, str] = {}  # a running command's group -> its mark
        self._closed = False
        for sub in ("home", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.host_path(workdir).mkdir(parents=True, exist_ok=True)

    # -- paths ------------------------------------------------------------------------
    def host_path(self, path: str) -> Path:
        """The host path of a sandbox path (relative paths are relative to ``workdir``)."""
        if not isinstance(path, str) or not path:
            raise ValueError(f"expected a non-empty sandbox path, got {path!r}")
        full = posixpath.normpath(posixpath.join(self.workdir, path))
        return self.root / full.lstrip("/")  # normpath already removed every ".."

    # -- commands ---------------------------------------------------------------------
    async def exec(self, cmd: str, *, timeout: float = 60.0,  # noqa: ASYNC109 - the protocol's
                   workdir: str | None = None, env: dict[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` with bash in its own process group; see the module docstring.

        The host's login profiles are not read (they would reset ``PATH``), so this is
        ``bash -c`` with the sandbox's environment rather than ``bash -lc``.
        """
        self._check_open()
        cwd = self.host_path(workdir or self.workdir)
        if not cwd.is_dir():
            return ExecResult(1, "", f"bash: cd: {workdir}: No such file or directory\n")
        # the mark reaches the processes that leave the group (setsid) too
        mark = new_mark()
        create = asyncio.ensure_future(asyncio.create_subprocess_exec(
            "bash", "--noprofile", "--norc", "-c", cmd, cwd=cwd,
            env={**self._env(env), MARK_VARIABLE: mark},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=self._set_limits))
        try:
            proc = await asyncio.shield(create)
        except asyncio.CancelledError:
            await self._kill_created(create, mark)
            raise
        self._groups[proc.pid] = mark
        # killed with this process too if it dies without running the finally below
        shared_watchdog().guard(proc.pid, group=True)
        shared_watchdog().guard_mark(mark)
        assert proc.stdout is not None and proc.stderr is not None
        readers = [asyncio.ensure_future(self._read_capped(s)) for s in (proc.stdout,
                                                                         proc.stderr)]
        timed_out = killed = False
        try:
            try:
                await asyncio.wait_for(_exited(proc), timeout)
            except TimeoutError:
                timed_out = True
            # Background children may hold the pipes open after the shell exits (so
            # ``proc.wait()``, which waits for the pipes too, would hang); the group dies
            # with the command either way.
            self._kill_command(proc.pid, mark)
            killed = True
            await proc.wait()
            (out, cut_out), (err, cut_err) = await asyncio.gather(*readers)
        finally:  # cancellation: take the processes down with us
            if not killed:  # once is enough: what carries the mark is gone, and stays gone
                self._kill_command(proc.pid, mark)
            self._groups.pop(proc.pid, None)
            shared_watchdog().release(proc.pid, group=True)
            shared_watchdog().release_mark(mark)
            for r in readers:
                r.cancel()
            if proc.returncode is None or any(not r.done() for r in readers):
                # reap it, so its transport is not left to a closed event loop
                await asyncio.shield(_reap(proc))
        return ExecResult(-1 if timed_out else proc.returncode or 0,
                          out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                          timed_out=timed_out, truncated=cut_out or cut_err)

    async def _kill_created(self, create: asyncio.Future[asyncio.subprocess.Process],
                            mark: str) -> None:
        """Kill the process group of a command cancelled while asyncio was starting it.

        The process exists before asyncio has connected its pipes; cancelling the start
        would kill only ``bash`` and then wait for the pipes, which a background child keeps
        open. So the start is let finish (it takes milliseconds), then the group dies. A
        second cancel does not cut that wait short: a start still pending when its event loop
        closes is cancelled there, and asyncio (3.11) then waits forever for pipes it never
        connected. The caller re-raises the first cancel.
        """
        create.add_done_callback(functools.partial(self._kill_started, mark))  # whenever it ends
        deadline = asyncio.get_running_loop().time() + 60
        while not create.done() and asyncio.get_running_loop().time() < deadline:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({create}, timeout=1)
        if create.done() and not create.cancelled() and create.exception() is None:
            await asyncio.shield(_reap(create.result()))

    def _kill_started(self, mark: str,
                      create: asyncio.Future[asyncio.subprocess.Process]) -> None:
        if not create.cancelled() and create.exception() is None:
            self._kill_command(create.result().pid, mark)

    async def _read_capped(self, stream: asyncio.StreamReader) -> tuple[bytes, bool]:
        kept, cut = bytearray(), False
        while chunk := await stream.read(65536):
            room = self.max_output_bytes - len(kept)
            if len(chunk) > room:
                cut = True
            kept += chunk[:max(room, 0)]
        return bytes(kept), cut

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        # The interpreter running agentgym first on PATH: `python` has pytest and friends.
        path = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin",
                                "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"])
        env = {"PATH": path, "HOME": str(self.root / "home"), "TMPDIR": str(self.root / "tmp"),
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONUNBUFFERED": "1", "GIT_CONFIG_NOSYSTEM": "1", "TERM": "dumb",
               "PAGER": "cat", "GIT_PAGER": "cat", **GIT_IDENTITY}
        env.update(extra or {})
        return env

    def _set_limits(self) -> None:  # runs in the child between fork and exec
        for kind, value in ((resource.RLIMIT_AS, self.limits.memory_bytes),
                            (resource.RLIMIT_FSIZE, self.limits.file_bytes),
                            (resource.RLIMIT_CPU, self.limits.cpu_seconds),
                            (resource.RLIMIT_CORE, 0)):
            if value is not None:
                _, hard = resource.getrlimit(kind)
                resource.setrlimit(kind, (value if hard == resource.RLIM_INFINITY
                                          else min(value, hard), hard))

    @staticmethod
    def _kill_command(pgid: int, mark: str) -> None:
        """Kill a command's process group, then whatever else carries its mark."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        kill_marked(mark)

    # -- files ------------------------------------------------------------------------
    async def write_file(self, path: str, content: str | bytes) -> None:
        """Write a file (parents created); text is encoded as UTF-8."""
        self._check_open()
        target = self.host_path(path)
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        await asyncio.to_thread(_write, target, data)

    async def read_file(self, path: str) -> bytes:
        """The bytes of a file; FileNotFoundError / IsADirectoryError as for ``open``."""
        self._check_open()
        return await asyncio.to_thread(self.host_path(path).read_bytes)

    async def copy_in(self, host_path: str, path: str) -> None:
        """Copy a host file or directory tree to ``path`` in the sandbox."""
        self._check_open()
        await asyncio.to_thread(_copy, Path(host_path), self.host_path(path))

    async def copy_out(self, path: str, host_path: str) -> None:
        """Copy a sandbox file or directory tree to ``host_path`` on the host."""
        self._check_open()
        await asyncio.to_thread(_copy, self.host_path(path), Path(host_path))

    async def diff(self, workdir: str | None = None) -> str:
        """``git diff`` of the working tree against HEAD, untracked files included."""
        return await git_diff(self, workdir or self.workdir)

    # -- lifetime ---------------------------------------------------------------------
    async def aclose(self) -> None:
        """Kill every running command's process group and remove the root. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for pgid, mark in list(self._groups.items()):
            self._kill_command(pgid, mark)
        if self._own_root:
            await asyncio.to_thread(shutil.rmtree, self.root, True)

    async def __aenter__(self) -> LocalSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the local sandbox was used after aclose(); start a new one")

    def __repr__(self) -> str:
        return f"<LocalSandbox root={str(self.root)!r} workdir={self.workdir!r}>"


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Wait for the process itself to exit, not for its pipes to close.

    ``returncode`` is set when the process exits; poll it quickly at first, then every 50 ms.
    """
    delay = 0.001
    while proc.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


async def _reap(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 10)
