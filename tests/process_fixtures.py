"""Processes the tests start: waited for by readiness, always ended, none outliving the session.

- ``spawn`` (fixture): starts a command in a process group of its own with its output in a
  file; when the test ends, however it ends, the whole group is killed and reaped.
- :func:`killed_outright`: runs a script that starts processes, SIGKILLs it, and yields what
  it started, for tests of what dies with a process that runs no cleanup.
- :func:`wait_until`: polls a readiness condition (a port, a printed line, a file) with a
  generous bound, failing early with the command's output if the command exits first.
- The session check: at the end of the session, every process the tests started that is still
  running fails the session, is named, and is killed. A process counts as started by the tests
  when it descends from the pytest process or carries :data:`SESSION_ENV` in its environment
  (set here at start-up, so inherited by everything the tests start, orphans included, and by
  nothing that other users of the machine run). Processes meant to outlive a test are stopped
  by their own fixtures before this check; the few kept on purpose are listed in
  :data:`KEPT` with the reason. Under pytest-xdist each worker is such a session of its own
  (its pid is its marker); it reports what it killed to the controller, which fails the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SESSION_ENV = "AGENTGYM_TEST_SESSION"
"""Set to the pytest process's pid for the session; child processes inherit it."""
READY_S = 300.0
"""How long a command may take to become ready (a loaded 2-core machine can take minutes to
import torch and load a model); a bound on a hang, not a performance check."""
STOP_S = 120.0
"""How long a command may take to exit once told to stop (same reasoning)."""
LEFT_RUNNING = "agentgym_left_running"
"""Where a pytest-xdist worker's session check puts its finding for the controller."""
GRACE_S = 15.0
"""How long the session check waits for processes that are already exiting."""
KEPT = (
    # The private Docker engine is shared by concurrent test sessions (engine_lease): the last
    # session to finish stops it, so it may rightly outlive this one.
    ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "docker-proxy",
     "runc"),
    # The container reaper waits for this process's exit, then removes its containers and ends
    # (seconds later); Python's multiprocessing helpers end with the process that started them.
    ("agentgym.sandboxes.engine import reap", "multiprocessing.resource_tracker",
     "multiprocessing.forkserver",
     # wandb's service process outlives a finished run and exits with the process that
     # started it (the pytest process itself)
     "wandb-core",
     # the process's watchdog (agentgym.watchdog.shared_watchdog) ends with it too
     "agentgym-watchdog"),
)
"""Program names, then command-line fragments, of processes the check leaves alone."""


@dataclass(frozen=True)
class Started:
    """A command started by :func:`spawn`."""

    proc: subprocess.Popen[bytes]
    log: Path
    """Its stdout and stderr, together (a file, so a full pipe can never stall it)."""

    def output(self) -> str:
        """Everything it printed so far."""
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to its whole process group, as a terminal's Ctrl-C (SIGINT) does."""
        os.killpg(self.proc.pid, sig)


def end_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Kill ``proc``'s process group (started with ``start_new_session``) and reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader: kill it too
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # ESRCH when it goes between the open and the read
        return False


def gone_within(pid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``pid`` to stop running; whether it did."""
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


@contextlib.contextmanager
def killed_outright(script: str, *args: str) -> Iterator[list[int]]:
    """Run Python ``script`` (with ``args``), which prints the pids it started on one line,
    SIGKILL it once printed, and yield those pids; whichever still runs afterwards is killed."""
    owner = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                             text=True)
    assert owner.stdout is not None
    pids: list[int] = []
    try:
        pids = [int(word) for word in owner.stdout.readline().split()]
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        yield pids
    finally:
        owner.kill()
        owner.wait()
        owner.stdout.close()
        for pid in pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def swept_after_its_owner(prefix: str, owner: int, folder: str | None = None) -> bool:
    """Whether dead process ``owner`` left ``prefix`` scratch folders behind (in ``folder``,
    default the temporary folder) and a sweep then removed every one of them."""
    import tempfile

    from agentgym.scratch import sweep_scratch

    left = [p for p in Path(folder or tempfile.gettempdir()).glob(f"{prefix}*")
            if f"-{owner}-" in p.name]
    sweep_scratch(prefix, folder)
    return bool(left) and not any(p.exists() for p in left)


def _hear_ctrl_c() -> None:
    """In the child: the default SIGINT disposition, whatever the suite was started from.

    A shell's background job (``cmd &`` without job control) starts with SIGINT ignored, its
    children inherit that, and Python then installs no KeyboardInterrupt handler: the
    Ctrl-C the tests send would do nothing.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Started]]:
    """``spawn(argv, env=None, cwd=None)``: start a command; its group is killed at the end."""
    started: list[Started] = []

    def start(argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None) -> Started:
        log = tmp_path / f"process-{len(started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=cwd,
                                    env=dict(env) if env is not None else None,
                                    start_new_session=True, preexec_fn=_hear_ctrl_c)
        started.append(Started(proc, log))
        return started[-1]

    yield start
    for each in started:
        end_group(each.proc)


def wait_until(ready: Callable[[], bool], what: str, started: Started,
               bound: float = READY_S) -> None:
    """Poll ``ready`` until it holds; fail if ``started`` exits first or ``bound`` s pass."""
    deadline = time.monotonic() + bound
    while not ready():
        if started.proc.poll() is not None:
            pytest.fail(f"the command exited ({started.proc.returncode}) before {what}:\n"
                        f"{started.output()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {bound:g} s:\n{started.output()[-3000:]}")
        time.sleep(0.2)


def stop_and_wait(started: Started, sig: int, bound: float = STOP_S) -> float:
    """Send ``sig`` to the command's group and wait for it to exit; returns the seconds taken."""
    sent = time.monotonic()
    started.signal(sig)
    try:
        started.proc.wait(bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {bound:g} s after signal {sig}:\n{started.output()[-3000:]}")
    return time.monotonic() - sent


# -- the session check ---------------------------------------------------------------------
def _proc_table() -> dict[int, tuple[int, bytes, str]]:
    """pid -> (parent pid, environment block, program name) of every running process."""
    table: dict[int, tuple[int, bytes, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                head, rest = f.read().rsplit(b")", 1)
            fields = rest.split()
            if fields[0] in (b"Z", b"X"):  # exited (waiting to be reaped): not running
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
            table[int(name)] = (int(fields[1]), environ,
                                head.split(b"(", 1)[1].decode(errors="replace"))
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return table


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def session_processes(session: str | None = None) -> dict[int, str]:
    """Running processes started by this test session (pid -> command line), less :data:`KEPT`."""
    me = os.getpid()
    marker = f"{SESSION_ENV}={session or os.environ.get(SESSION_ENV, me)}".encode()
    table = _proc_table()
    marked = {pid for pid, (_, environ, _) in table.items() if marker in environ.split(b"\0")}

    def ours(pid: int) -> bool:
        for _ in range(64):  # walk up the tree; bounded against odd /proc states
            if pid not in table or pid <= 1 or table[pid][2] in KEPT[0]:
                return False  # not ours, or the Docker engine (and what runs under it)
            if pid == me or pid in marked:
                return True
            pid = table[pid][0]
        return False

    found = {}
    for pid in table:
        if pid == me or not ours(pid):
            continue
        line = _cmdline(pid)
        if not any(fragment in line for fragment in KEPT[1]):
            found[pid] = line or table[pid][2]
    return found


def pytest_configure(config: pytest.Config) -> None:
    os.environ[SESSION_ENV] = str(os.getpid())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not os.path.isdir("/proc"):  # the check reads /proc (Linux, where CI runs)
        return
    if session.config.pluginmanager.hasplugin("dsession"):
        # pytest-xdist's controller runs no test: each worker checks what it started and
        # sends its finding here (pytest_testnodedown), where it fails the whole run
        _fail_session(session, "\n".join(getattr(session.config, LEFT_RUNNING, [])))
        return
    jvm = sys.modules.get("agentgym.envs.jvm")
    if jvm is not None:  # the JVM pools live for the process on purpose; end them first
        jvm.shutdown_pools()
    deadline = time.monotonic() + GRACE_S
    left = session_processes()
    while left and time.monotonic() < deadline:  # some are exiting after their finalisers
        time.sleep(0.25)
        left = session_processes()
    if not left:
        return
    for pid in left:  # nothing is left behind, even when the check fails
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    lines = "\n".join(f"  pid {pid}: {line[:300]}" for pid, line in sorted(left.items()))
    message = (f"{len(left)} process(es) started by the tests were still running at the end "
               f"of the session (now killed); end them in the test's fixture:\n{lines}")
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its controller reports and fails
        workeroutput[LEFT_RUNNING] = message
    _fail_session(session, message)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In pytest-xdist's controller: keep what a finished worker found still running."""
    message = getattr(node, "workeroutput", {}).get(LEFT_RUNNING)
    if message:
        found = getattr(node.config, LEFT_RUNNING, [])
        setattr(node.config, LEFT_RUNNING, [*found, message])


def _fail_session(session: pytest.Session, message: str) -> None:
    if not message:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(message, red=True)
    else:
        print(message, file=sys.stderr)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
