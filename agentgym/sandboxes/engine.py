"""Find a Docker engine, or start a private one for tests and development.

Order: ``$DOCKER_HOST``, the system socket ``/var/run/docker.sock``, then a private ``dockerd``
under ``~/.cache/agentgym/docker`` (``$AGENTGYM_DOCKER_ROOT``) that keeps its images between
runs, so the base image is built once. Several processes share the private engine through
:func:`engine_lease`: each holds a shared lock while it uses the engine, and the last one out
stops the daemon (unless told to keep it).

The private engine runs with ``--iptables=false --bridge=none`` (it touches no host networking;
containers get ``--network none``). It tries the ``overlay2`` storage driver first (fast
container starts) and falls back to ``vfs``, which works everywhere but copies the image's root
filesystem on every container start.

The second half keeps track of what runs in the engine: sandbox containers carry labels
naming their owner process (``host:pid:start``), a watchdog process per owner removes them
when the owner dies, and :func:`sweep` removes those of owners that are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentgym.errors import MissingExtraError
from agentgym.sandboxes.base import SandboxError
from agentgym.watchdog import process_start

T = TypeVar("T")
SYSTEM_SOCKET = "unix:///var/run/docker.sock"
LABEL = "agentgym.sandbox"
"""Every sandbox container carries ``agentgym.sandbox=1``."""
OWNER_LABEL = "agentgym.owner"
"""``host:pid:start`` of the process that started the container."""
DRIVERS = ("overlay2", "vfs")


class EngineError(SandboxError):
    """No Docker engine is reachable and none could be started."""


def docker_module() -> Any:
    """The ``docker`` SDK, imported on first use (it is the ``[swe]`` extra)."""
    try:
        import docker
    except ImportError as exc:
        raise MissingExtraError("docker", "swe", "Docker sandboxes") from exc
    return docker


def client(base_url: str, timeout: float = 120.0) -> Any:
    """A ``docker.DockerClient`` for ``base_url`` sized for many concurrent sandboxes."""
    # The default pool of 10 connections would make a 32-episode rollout wait on itself.
    c = docker_module().DockerClient(base_url=base_url, timeout=timeout, max_pool_size=64)
    c.agentgym_url = base_url  # the SDK keeps only "http+docker://localhost" for sockets
    return c


def default_root() -> Path:
    """Where the private engine keeps its data and socket."""
    env = os.environ.get("AGENTGYM_DOCKER_ROOT")
    return Path(env) if env else Path.home() / ".cache" / "agentgym" / "docker"


def ping(base_url: str, timeout: float = 3.0) -> bool:
    """True when an engine answers at ``base_url``."""
    if base_url.startswith("unix://") and not os.path.exists(base_url[len("unix://"):]):
        return False
    try:
        c = client(base_url, timeout=timeout)
        try:
            return bool(c.ping())
        finally:
            c.close()
    except Exception:  # any failure to talk means "not reachable"
        return False


def private_socket(root: Path) -> str:
    """The private engine's socket address under ``root``."""
    sock = root / "docker.sock"
    if len(str(sock)) > 100:  # sun_path holds 108 bytes
        raise EngineError(f"the engine socket path {sock} is too long for a unix socket; "
                          "set AGENTGYM_DOCKER_ROOT to a shorter directory")
    return f"unix://{sock}"


def find_engine(root: Path | None = None) -> str | None:
    """The address of a reachable engine, or None."""
    candidates = [os.environ.get("DOCKER_HOST", ""), SYSTEM_SOCKET,
                  private_socket(root or default_root())]
    return next((url for url in candidates if url and ping(url)), None)


def can_start_engine() -> str | None:
    """Why a private engine cannot be started here, or None when it can."""
    if shutil.which("dockerd") is None:
        return "dockerd is not installed (apt-get install docker.io)"
    if os.geteuid() != 0:
        return "starting dockerd needs root"
    return None


def start_engine(root: Path | None = None, driver: str = "auto", wait_s: float = 60.0) -> str:
    """Start a private ``dockerd`` under ``root`` (detached; it outlives this process).

    Args:
        root: Data, socket and log directory (default :func:`default_root`).
        driver: ``"overlay2"``, ``"vfs"`` or ``"auto"`` (overlay2, then vfs).
        wait_s: How long to wait for the engine to answer.

    Returns:
        The engine's ``unix://`` address.

    Raises:
        EngineError: dockerd is missing, we are not root, or it did not come up (the error
            quotes the end of its log).
    """
    root = root or default_root()
    url = private_socket(root)
    if ping(url):
        return url
    if why := can_start_engine():
        raise EngineError(f"no Docker engine is reachable and none can be started: {why}")
    if driver not in ("auto", *DRIVERS):
        raise ValueError(f"driver must be 'auto', 'overlay2' or 'vfs', got {driver!r}")
    root.mkdir(parents=True, exist_ok=True)
    drivers = _driver_order(root) if driver == "auto" else (driver,)
    failures = []
    for drv in drivers:
        log = root / f"dockerd-{drv}.log"
        proc = _spawn(root, drv, log)
        if _wait_up(url, proc, wait_s):
            (root / "driver").write_text(drv)
            return url
        _stop_pid(proc.pid)
        failures.append(f"--storage-driver={drv}: {_tail(log)}")
    raise EngineError("dockerd did not start; " + " | ".join(failures))


def _driver_order(root: Path) -> tuple[str, ...]:
    known = root / "driver"  # the driver that worked last time holds the cached images
    first = known.read_text().strip() if known.exists() else DRIVERS[0]
    return (first, *[d for d in DRIVERS if d != first])


def _spawn(root: Path, driver: str, log: Path) -> subprocess.Popen[bytes]:
    sock = root / "docker.sock"
    sock.unlink(missing_ok=True)
    cmd = ["dockerd", f"--storage-driver={driver}", f"--data-root={root / f'data-{driver}'}",
           f"--exec-root={root / 'exec'}", f"--pidfile={root / 'dockerd.pid'}",
           f"--host=unix://{sock}", "--iptables=false", "--ip-masq=false", "--bridge=none"]
    with open(log, "wb") as out:
        # Own session: a Ctrl-C or SIGTERM sent to the test run's process group must not take
        # the engine down before the sandboxes in it are removed.
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_up(url: str, proc: subprocess.Popen[bytes], wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if ping(url, timeout=2.0):
            return True
        time.sleep(0.2)
    return False


def _tail(log: Path, n: int = 400) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = [ln for ln in text.splitlines() if "level=error" in ln or "level=fatal" in ln]
    return ((lines[-1] if lines else text.strip()[-n:]) or "no log output")[-n:]


def _stop_pid(pid: int, wait_s: float = 20.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def keep_engine(root: Path | None = None) -> None:
    """Mark the private engine under ``root`` as started by hand.

    ``agentgym sandbox engine`` does, so that leases leave it running; only
    :func:`stop_engine` stops it. The mark names the daemon's pid, so a stale one (the
    machine restarted) does not keep an engine a lease starts later.
    """
    root = root or default_root()
    root.mkdir(parents=True, exist_ok=True)
    pidfile = root / "dockerd.pid"
    (root / "kept").write_text(pidfile.read_text() if pidfile.is_file() else "")


def _kept(root: Path) -> bool:
    pidfile = root / "dockerd.pid"
    return ((root / "kept").is_file() and pidfile.is_file()
            and (root / "kept").read_text() == pidfile.read_text())


def stop_engine(root: Path | None = None) -> bool:
    """Stop the private engine under ``root``; True when one was running."""
    ((root or default_root()) / "kept").unlink(missing_ok=True)
    pidfile = (root or default_root()) / "dockerd.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    _stop_pid(pid)
    pidfile.unlink(missing_ok=True)
    return True


_HELD: dict[Path, Any] = {}  # root -> this process's open lease file (hold_private_engine)
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def engine_lease(root: Path | None = None, *, keep: bool = False) -> Iterator[str]:
    """Use a reachable engine, starting the private one if needed, for the ``with`` block.

    Shared by concurrent processes: the private engine is stopped when the last lease under
    ``root`` ends, unless ``keep`` (or ``$AGENTGYM_KEEP_ENGINE=1``, or the engine was
    started by hand: :func:`keep_engine`). An engine found at
    ``$DOCKER_HOST`` or the system socket is used as is and never stopped.

    Yields:
        The engine's address (pass it as ``base_url`` or ``DOCKER_HOST``).
    """
    root = root or default_root()
    for url in (os.environ.get("DOCKER_HOST", ""), SYSTEM_SOCKET):
        if url and url != private_socket(root) and ping(url):
            yield url
            return
    root.mkdir(parents=True, exist_ok=True)
    keep = keep or os.environ.get("AGENTGYM_KEEP_ENGINE") == "1"
    with open(root / "lease.lock", "a+") as lease:
        fcntl.flock(lease, fcntl.LOCK_SH)  # waits while a last user is stopping the engine
        try:
            with open(root / "start.lock", "a+") as start:
                fcntl.flock(start, fcntl.LOCK_EX)  # one starter at a time
                url = start_engine(root)
            yield url
        finally:
            fcntl.flock(lease, fcntl.LOCK_UN)
            with _HELD_LOCK:  # this process's own hold ends with its lease
                held = _HELD.pop(root, None)
            if held is not None:
                held.close()
            if not keep and not _kept(root):
                with contextlib.suppress(BlockingIOError):
                    fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else holds one
                    stop_engine(root)
                    fcntl.flock(lease, fcntl.LOCK_UN)


def hold_private_engine(url: str, root: Path | None = None) -> None:
    """Keep the private engine at ``url`` from being stopped while this process lives.

    A process that found the private engine running and uses it without an
    :func:`engine_lease` (a sandbox) would otherwise lose it mid-run when the last lease
    holder ends and stops it. This takes a shared lease until the process exits; the engine
    is then stopped by the next lease that ends after it (or by this process's own
    :func:`engine_lease`, which drops the hold as it ends). Any other ``url`` is left alone.
    """
    root = root or default_root()
    if url != private_socket(root):
        return
    with _HELD_LOCK:  # sandboxes start in worker threads: one hold per root
        if root not in _HELD:
            handle = open(root / "lease.lock", "a+")  # noqa: SIM115 - held until exit
            fcntl.flock(handle, fcntl.LOCK_SH)  # waits while a last user stops the engine
            _HELD[root] = handle


# -- containers, owners and cleanup ---------------------------------------------------
def engine_url(client: Any) -> str:
    """The address a client talks to (the SDK keeps only ``http+docker://`` for sockets)."""
    return getattr(client, "agentgym_url", None) or os.environ.get("DOCKER_HOST") or SYSTEM_SOCKET


def remove_container(client: Any, container_id: str) -> None:
    """SIGKILL and delete a container; a container already gone is fine."""
    docker = docker_module()
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if "already in progress" not in str(exc):
            raise SandboxError(f"could not remove container {container_id[:12]}: {exc}") from exc


@dataclass(frozen=True)
class ContainerRef:
    """A sandbox container as listed: its id and labels."""

    id: str
    labels: dict[str, str]


def list_sandboxes(client: Any, **labels: str) -> list[ContainerRef]:
    """Sandbox containers (running or not) carrying every given label."""
    filters = [LABEL, *(f"{k}={v}" for k, v in labels.items())]
    # The low-level listing: the high-level one inspects each container and fails when
    # another process removes one in between.
    return [ContainerRef(c["Id"], c.get("Labels") or {})
            for c in client.api.containers(all=True, filters={"label": filters})]


def owner_id(pid: int | None = None) -> str:
    """``host:pid:start`` of a process: who owns the containers it starts."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start(pid)}"


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    if host != socket.gethostname():
        return True  # another machine's owner: not ours to judge
    pid, _, start = rest.partition(":")
    return pid.isdigit() and process_start(int(pid)) == start


def sweep(client: Any) -> int:
    """Remove sandbox containers whose owner process on this host is gone; returns how many."""
    gone = [c for c in list_sandboxes(client)
            if not _owner_alive(c.labels.get(OWNER_LABEL, ""))]
    for c in gone:
        remove_container(client, c.id)
    return len(gone)


_reapers: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
_reaper_lock = threading.Lock()


def start_reaper(base_url: str, owner: str) -> None:
    """Start (once per engine and owner) the watchdog that removes our containers when we die.

    The watchdog blocks reading a pipe whose only writer is this process; the kernel closes
    it however we exit, and the watchdog then removes every container labelled with ``owner``.
    """
    with _reaper_lock:
        proc = _reapers.get((base_url, owner))
        if proc is not None and proc.poll() is None:
            return
        code = ("import sys; sys.stdin.buffer.read(); "
                "from agentgym.sandboxes.engine import reap; reap(sys.argv[1], sys.argv[2])")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        _reapers[(base_url, owner)] = subprocess.Popen(
            [sys.executable, "-c", code, base_url, owner], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True)  # outlives a signal sent to our process group


def reap(base_url: str, owner: str) -> None:
    """Remove every sandbox container of ``owner`` (the watchdog's job)."""
    c = client(base_url)
    for box in list_sandboxes(c, **{OWNER_LABEL: owner}):
        remove_container(c, box.id)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking call in a fresh daemon thread and await its result."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def work() -> None:
        try:
            result, ok = fn(*args), True
        except BaseException as exc:  # delivered to the awaiting task
            result, ok = exc, False
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, ok, result)

    threading.Thread(target=work, daemon=True, name="agentgym-docker").start()
    return await future

