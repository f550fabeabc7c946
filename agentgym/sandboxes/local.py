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
  (:func:`agentgym.watchdog.new_mark`), or, if it cleared its environment too, by the
  command's output pipes it holds (:func:`agentgym.watchdog.holding`); ``aclose`` kills
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
import errno
import os
import posixpath
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agentgym.errors import ConfigError
from agentgym.sandboxes.base import ExecResult, SandboxError, git_diff
from agentgym.sandboxes.process import ProcessExit
from agentgym.scratch import scratch_dir
from agentgym.watchdog import MARK_VARIABLE, holding, kill_marked, new_mark, shared_watchdog

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
        # started with no await before its guards (agentgym.sandboxes.process says why)
        try:
            proc = subprocess.Popen(  # noqa: ASYNC220 - as asyncio's transport starts one
                ["bash", "--noprofile", "--norc", "-c", cmd], cwd=cwd,
                env={**self._env(env), MARK_VARIABLE: mark}, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=self._set_limits)
        except OSError as exc:
            if exc.errno != errno.E2BIG:
                raise
            # the command's own fault, as in a container, where the exec fails the same way
            return ExecResult(1, "", f"bash: argument list too long: the command is "
                              f"{len(cmd.encode())} bytes, more than one argument may be "
                              "(write long content to a file in smaller parts)\n")
        self._groups[proc.pid] = mark
        # killed with this process too if it dies without running the finally below
        shared_watchdog().guard(proc.pid, group=True)
        shared_watchdog().guard_mark(mark)
        loop = asyncio.get_running_loop()
        outputs: list[_Output] = []
        exit_: ProcessExit | None = None
        timed_out = killed = held = False
        try:
            assert proc.stdout is not None and proc.stderr is not None
            outputs += (_Output(loop, proc.stdout, self.max_output_bytes),
                        _Output(loop, proc.stderr, self.max_output_bytes))
            exit_ = ProcessExit(loop, proc)
            timed_out = await exit_.wait(timeout) is None
            # Background children may hold the pipes open after the shell exits; the group
            # dies with the command either way.
            self._kill_command(proc.pid, mark)
            killed = True
            held = not await _pipes_closed(outputs)
        finally:  # cancellation: take the processes down with us
            if not killed:  # once is enough: what carries the mark is gone, and stays gone
                self._kill_command(proc.pid, mark)
            self._groups.pop(proc.pid, None)
            shared_watchdog().release(proc.pid, group=True)
            shared_watchdog().release_mark(mark)
            for output in outputs:
                output.close()
            if exit_ is not None:
                try:
                    await exit_.wait(10)  # reaped (it was killed): no zombie, no warning
                finally:
                    exit_.close()
        (out, cut_out), (err, cut_err) = ((bytes(o.kept), o.cut) for o in outputs)
        return ExecResult(-1 if timed_out else proc.returncode or 0,
                          out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                          timed_out=timed_out, truncated=cut_out or cut_err or held)

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


class _Output:
    """One of a command's output pipes, read by the event loop as it fills.

    The first ``cap`` bytes are kept, the rest read and dropped (``cut``); ``eof`` is done
    when the pipe closes.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, pipe: IO[bytes], cap: int) -> None:
        self._loop, self._pipe, self._cap = loop, pipe, cap
        self.fd = pipe.fileno()
        self.kept, self.cut = bytearray(), False
        self.eof: asyncio.Future[None] = loop.create_future()
        os.set_blocking(self.fd, False)
        loop.add_reader(self.fd, self._read)

    def _read(self) -> None:  # one read a call: a chatty command cannot starve the loop
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._loop.remove_reader(self.fd)
            if not self.eof.done():
                self.eof.set_result(None)
            return
        room = self._cap - len(self.kept)
        self.cut = self.cut or len(chunk) > room
        self.kept += chunk[:max(room, 0)]

    def close(self) -> None:
        if not self._pipe.closed:
            self._loop.remove_reader(self.fd)
            self._pipe.close()


async def _pipes_closed(outputs: list[_Output], grace: float = 2.0) -> bool:
    """Wait for a killed command's pipes to close; whether they did.

    They close as its processes die. One that a process which left the group and cleared its
    environment (``env -i setsid ...``) still holds is found by the pipe itself after
    ``grace`` seconds and killed; if the pipe is still open after as long again (a process
    we may not kill), it is let go unread.
    """
    def open_() -> list[_Output]:
        return [o for o in outputs if not o.eof.done()]

    if open_():
        await asyncio.wait([o.eof for o in open_()], timeout=grace)
    for output in open_():
        for pid in holding(output.fd):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if open_():
        await asyncio.wait([o.eof for o in open_()], timeout=grace)
    return not open_()
