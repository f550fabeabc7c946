"""A persistent Python interpreter in a child process, with CPU, memory, time and output limits.

One :class:`PythonInterpreter` per episode: variables, imports and files persist across
:meth:`~PythonInterpreter.run` calls (like a notebook), and nothing persists across
interpreters. Each cell's last expression is echoed, as in a REPL.

What it is:

- a separate process (``python -I``) in its own session/process group, in a fresh temporary
  working directory that is deleted on ``aclose``;
- limited by rlimits: ``RLIMIT_AS`` (memory; allocations past it raise ``MemoryError`` in the
  cell), ``RLIMIT_CPU`` (CPU seconds for the whole interpreter; past it the process is
  killed and restarted), ``RLIMIT_FSIZE`` (largest file it may write) and ``RLIMIT_NOFILE``;
- a wall-clock timeout per call: the whole process group is killed (children included) and
  the next call starts a fresh interpreter, saying its variables are gone; the group dies
  with this process too, even killed outright (:func:`agentgym.watchdog.shared_watchdog`);
- no network when it can create a network namespace (``unshare --net``, needs root or user
  namespaces): the process sees only a loopback device that is down. Otherwise (``isolation
  == "rlimits"``) socket creation is blocked inside Python, which is *best effort*: C
  extensions, ``ctypes`` or a child process can still reach the network;
- stdout and stderr, including output of child processes and C code, captured and cut to
  ``max_output_chars``.

What it is not: a security boundary against hostile code. It runs as the same user with
the same view of the file system, and sets its rlimits itself before the first cell (code
running as root could raise them again). Use the Docker sandbox (``agentgym.sandboxes.docker``) for
untrusted code at scale.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

from agentgym.errors import ConfigError
from agentgym.sandboxes.base import SandboxError
from agentgym.sandboxes.process import ProcessExit
from agentgym.scratch import scratch_dir
from agentgym.watchdog import MARK_VARIABLE, kill_marked, new_mark, shared_watchdog

_WORKER = r"""
import ast, builtins, io, json, os, resource, signal, sys, tempfile, traceback
# limits are set here, before any cell runs, not in a preexec_fn (unsafe in threaded parents)
for name, value in json.loads(os.environ.pop("AGENTGYM_RLIMITS")).items():
    resource.setrlimit(getattr(resource, name), tuple(value))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing
proto_in = os.fdopen(os.dup(0), "rb")
proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0)
spill = tempfile.TemporaryFile(dir=".")  # OS-level output of C code and child processes
os.dup2(spill.fileno(), 1); os.dup2(spill.fileno(), 2)
sys.stdin = open(os.devnull)
if os.environ.pop("AGENTGYM_BLOCK_SOCKETS", "") == "1":
    import socket
    def _blocked(*a, **k):
        raise OSError("network access is disabled in this interpreter")
    socket.socket.connect = socket.socket.connect_ex = socket.socket.bind = _blocked
    socket.create_connection = socket.getaddrinfo = _blocked
class Capped(io.TextIOBase):
    def __init__(self, limit): self.parts, self.size, self.limit, self.cut = [], 0, limit, 0
    def writable(self): return True
    def write(self, s):
        s = str(s); room = self.limit - self.size
        if room > 0: self.parts.append(s[:room])
        self.cut += max(0, len(s) - max(room, 0)); self.size += len(s); return len(s)
    def text(self): return "".join(self.parts)
ns = {"__name__": "__main__", "__builtins__": builtins}
for line in proto_in:
    req = json.loads(line); limit = req["limit"]
    out, err = Capped(limit), Capped(limit); sys.stdout, sys.stderr = out, err
    error = None
    try:
        tree = ast.parse(req["code"], "<cell>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns)
            if value is not None: print(repr(value))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt): raise
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        error = "".join(traceback.format_exception(type(exc), exc, tb))
        error = error if len(error) <= limit else "[traceback cut]..." + error[-limit:]
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    spill.flush(); spill.seek(0); raw = spill.read(limit + 1); spill.seek(0); spill.truncate()
    extra = raw.decode("utf-8", "replace")
    cut = out.cut + err.cut + max(0, len(extra) - limit)
    reply = {"stdout": out.text() + extra[:limit], "stderr": err.text(), "error": error,
             "truncated": cut > 0}
    proto_out.write(json.dumps(reply) + "\n"); proto_out.flush()
"""


@dataclass(frozen=True)
class InterpreterLimits:
    """Resource limits of one interpreter."""

    call_timeout: float = 10.0
    """Wall-clock seconds one call may run before the interpreter is killed and restarted."""
    cpu_seconds: int = 60
    """CPU seconds the interpreter may use in total (RLIMIT_CPU); past it, it is restarted."""
    memory_mb: int = 1024
    """Address-space limit in MiB (RLIMIT_AS); allocations past it raise MemoryError."""
    max_file_mb: int = 64
    """Largest file the interpreter may write, in MiB (RLIMIT_FSIZE)."""
    max_output_chars: int = 4_000
    """stdout and stderr of one call are each cut to this many characters."""
    network: Literal["off", "on"] = "off"
    """``off``: a network namespace when possible, else sockets blocked in Python."""

    def __post_init__(self) -> None:
        for name in ("call_timeout", "cpu_seconds", "memory_mb", "max_file_mb",
                     "max_output_chars"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"InterpreterLimits.{name} must be > 0, got "
                                  f"{getattr(self, name)!r}")
        if self.network not in ("off", "on"):
            raise ConfigError(f"network must be 'off' or 'on', got {self.network!r}")


@dataclass(frozen=True)
class RunResult:
    """What one call printed and raised."""

    stdout: str
    """Captured stdout (with the echoed last expression), cut to the limit."""
    stderr: str
    """Captured stderr, cut to the limit."""
    error: str | None = None
    """The traceback of an exception the cell raised, or why the interpreter died."""
    timed_out: bool = False
    """The call ran past ``call_timeout`` and the interpreter was killed."""
    restarted: bool = False
    """A fresh interpreter ran this call because the previous one was killed."""
    truncated: bool = False
    """Some output was cut."""

    @property
    def ok(self) -> bool:
        """The cell ran to the end without an exception."""
        return self.error is None and not self.timed_out

    def render(self) -> str:
        """The text a model reads: notes, stdout, stderr and the error."""
        parts = []
        if self.restarted:
            parts.append("[note: the interpreter was restarted; earlier variables are gone]")
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.error:
            parts.append(self.error.rstrip("\n"))
        if self.truncated:
            parts.append("[output truncated]")
        return "\n".join(parts) if parts else "[no output]"


class _Worker:
    """The running interpreter process and its two protocol pipes."""

    def __init__(self, proc: subprocess.Popen[bytes], exit_: ProcessExit) -> None:
        self.proc, self.exit = proc, exit_
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.reading: asyncio.ReadTransport | None = None
        self.writing: asyncio.WriteTransport | None = None


_NETNS: bool | None = None  # the probe result, once per process


def network_namespace_available() -> bool:
    """Whether ``unshare --net`` works here (checked once per process)."""
    global _NETNS
    if _NETNS is None:
        exe = shutil.which("unshare")
        try:
            _NETNS = exe is not None and subprocess.run(
                [exe, "--net", "--", "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            _NETNS = False
    return _NETNS


class PythonInterpreter:
    """A persistent Python process for one episode; see the module docstring.

    Example:
        >>> import asyncio
        >>> async def main():
        ...     async with PythonInterpreter() as py:
        ...         await py.run("x = 6 * 7")
        ...         return (await py.run("x")).stdout.strip()
        >>> asyncio.run(main())
        '42'
    """

    def __init__(self, limits: InterpreterLimits | None = None) -> None:
        self.limits = limits or InterpreterLimits()
        self._worker: _Worker | None = None
        self._mark = ""  # carried by the running interpreter's processes, setsid's included
        self._dir: str | None = None
        self._died = False
        self._closed = False
        self._lock = asyncio.Lock()
        self.calls = 0
        """Calls run so far."""

    @property
    def isolation(self) -> str:
        """``netns`` (a network namespace) or ``rlimits`` (sockets blocked in Python only)."""
        if self.limits.network == "on" or not network_namespace_available():
            return "rlimits"
        return "netns"

    async def start(self) -> None:
        """Start the interpreter process (``run`` does this when needed)."""
        if self._closed:
            raise SandboxError("the interpreter was closed; make a new PythonInterpreter")
        if self._dir is None:
            self._dir = str(scratch_dir("agentgym-py-"))
        limits = self.limits
        argv = [sys.executable, "-I", "-c", _WORKER]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self._dir,
               "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        if limits.network == "off":
            if self.isolation == "netns":
                argv = [shutil.which("unshare") or "unshare", "--net", "--", *argv]
            else:
                env["AGENTGYM_BLOCK_SOCKETS"] = "1"

        mem, size = limits.memory_mb * 2**20, limits.max_file_mb * 2**20
        env["AGENTGYM_RLIMITS"] = json.dumps({
            "RLIMIT_AS": [mem, mem], "RLIMIT_CPU": [limits.cpu_seconds, limits.cpu_seconds + 1],
            "RLIMIT_FSIZE": [size, size], "RLIMIT_NOFILE": [256, 256]})
        self._mark = env[MARK_VARIABLE] = new_mark()
        try:  # no await from the start to the guards (agentgym.sandboxes.process)
            proc = subprocess.Popen(  # noqa: ASYNC220 - as asyncio's transport starts one
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd=self._dir, env=env, start_new_session=True)
        except OSError as exc:
            raise SandboxError(f"could not start the Python interpreter: {exc}") from exc
        # killed with this process too if it dies without closing us (a cell's children too)
        shared_watchdog().guard(proc.pid, group=True)
        shared_watchdog().guard_mark(self._mark)
        loop = asyncio.get_running_loop()
        self._worker = worker = _Worker(proc, ProcessExit(loop, proc))
        try:
            assert proc.stdin is not None and proc.stdout is not None
            reader = worker.stdout = asyncio.StreamReader(limit=2**22)
            worker.reading, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
            worker.writing, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, proc.stdin)
            worker.stdin = asyncio.StreamWriter(worker.writing, protocol, None, loop)
        except BaseException:  # a cancel too: the process dies, not left half connected
            await self._kill()
            raise

    async def run(self, code: str, timeout: float | None = None  # noqa: ASYNC109 - per cell
                  ) -> RunResult:
        """Run a cell; returns what it printed, its echoed last value and any traceback.

        Args:
            code: Python source.
            timeout: Wall seconds for this call (default ``limits.call_timeout``).

        Raises:
            SandboxError: the interpreter could not be started (an infrastructure fault).
        """
        async with self._lock:  # one cell at a time, as in a notebook
            restarted = self._died
            if self._worker is None or self._worker.exit.done.done():
                await self._kill()
                await self.start()
            self._died = False
            self.calls += 1
            worker = self._worker
            assert worker is not None and worker.stdin is not None and worker.stdout is not None
            limit = self.limits.max_output_chars
            request = json.dumps({"code": str(code), "limit": limit}) + "\n"
            wall = timeout if timeout is not None else self.limits.call_timeout
            try:
                worker.stdin.write(request.encode("utf-8", "replace"))
                async with asyncio.timeout(wall):
                    await worker.stdin.drain()
                    line = await worker.stdout.readline()
            except TimeoutError:
                await self._kill()
                self._died = True
                return RunResult("", "", f"TimeoutError: the cell ran past {wall:g} s; the "
                                 "interpreter was stopped and will restart on the next call "
                                 "(variables are lost)", timed_out=True, restarted=restarted)
            except (BrokenPipeError, ConnectionResetError):
                line = b""
            if not line:
                return await self._died_result(restarted)
            reply = json.loads(line)
            return RunResult(reply["stdout"], reply["stderr"], reply["error"],
                             restarted=restarted, truncated=reply["truncated"])

    async def _died_result(self, restarted: bool) -> RunResult:
        # the protocol's pipe closed: the interpreter is ending, or ended
        code = await self._worker.exit.wait(10) if self._worker is not None else None
        await self._kill()
        self._died = True
        why = {-signal.SIGXCPU: f"it used its {self.limits.cpu_seconds} s of CPU time",
               -signal.SIGKILL: "it was killed (out of memory or CPU time)",
               -signal.SIGSEGV: "it crashed (segmentation fault)"}.get(
                   code or 0, f"it exited with status {code}" if code is not None else
                   "it closed its output and did not exit (it was killed)")
        return RunResult("", "", f"InterpreterDied: the interpreter stopped because {why}; "
                         "it will restart on the next call (variables are lost)",
                         restarted=restarted)

    async def _kill(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        pid = worker.proc.pid
        if not worker.exit.done.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the cell's children too
        kill_marked(self._mark)  # and those that left the group
        # the loop lets go of the pipes at once (abort drops unsent bytes), then they close
        if worker.writing is not None and not worker.writing.is_closing():
            worker.writing.abort()
        if worker.reading is not None:
            worker.reading.close()
        for pipe in (worker.proc.stdin, worker.proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            await worker.exit.wait(10)  # reaped: no zombie
        finally:
            worker.exit.close()
            shared_watchdog().release(pid, group=True)
            shared_watchdog().release_mark(self._mark)

    async def aclose(self) -> None:
        """Kill the interpreter and delete its working directory; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._kill()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def __aenter__(self) -> PythonInterpreter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
