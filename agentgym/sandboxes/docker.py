"""The Docker sandbox: the :class:`~agentgym.sandboxes.base.Sandbox` contract on a container.

What a container gets by default (:class:`DockerConfig`):

- **No network** (``--network none``), **no capabilities** (``--cap-drop ALL``,
  ``no-new-privileges``), a **non-root user** (uid 1000) and a **read-only root filesystem**;
  the only writable places are size-capped tmpfs mounts (the workdir, ``/tmp``, ``$HOME``),
  so a runaway write fills its mount, not the host's disk.
- **CPU, memory and process limits** (cgroups): a memory hog is OOM-killed inside the
  container, a fork bomb hits the pids limit.
- **A PID 1 that cannot be killed from inside**: a shell that ignores every catchable signal
  and reaps orphans (the kernel drops SIGKILL sent to a namespace's init from inside it), so
  ``kill -9 1`` or ``pkill sleep`` does not end the episode.
- **Per-command timeouts that kill the process group**: each command runs under coreutils
  ``timeout`` (its own process group, SIGKILL on expiry), and what it left in the background
  is killed when it ends; if the call still hangs, the host kills the group itself, and if
  even that fails the container is removed and the call raises :class:`SandboxError`.
- **Output caps**: each of stdout and stderr keeps its first ``max_output_bytes`` bytes; a
  command that keeps writing past 64 MiB is killed.
- **Labels** on every container (``agentgym.sandbox``, ``agentgym.owner``), and a watchdog
  process per owner that removes the owner's containers when it exits in any way (normal
  exit, exception, SIGTERM, even SIGKILL); ``engine.sweep`` removes leftovers of dead owners.

Blocking SDK calls run in daemon threads (never on the event loop, and a stuck engine call can
never hold up interpreter exit). Files move through ``tar``/``cat`` inside ``docker exec``,
because ``docker cp`` cannot see tmpfs mounts and refuses a read-only root.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError
from agentgym.sandboxes.base import ExecResult, SandboxError, git_diff
from agentgym.sandboxes.engine import (
    LABEL,
    OWNER_LABEL,
    docker_module,
    engine_url,
    find_engine,
    hold_private_engine,
    in_thread,
    owner_id,
    remove_container,
    start_reaper,
)
from agentgym.sandboxes.engine import client as make_client
from agentgym.sandboxes.image import DEFAULT_IMAGE
from agentgym.sandboxes.local import GIT_IDENTITY

KILL_AFTER_BYTES = 64 * 2**20  # a command still writing past this is killed
# PID 1: ignores every catchable signal (children inherit the ignore, so ``pkill sleep``
# cannot end it either) and reaps orphans while it waits.
INIT = 'trap "" HUP INT QUIT PIPE TERM USR1 USR2; while :; do sleep 86400 & wait $!; done'
# $1 workdir, $2 timeout, $3 pid file, $4 command. ``timeout`` puts itself and the command
# in a new process group and SIGKILLs the group on expiry; when the command ends, what it
# left in the background dies with the group; the pid file lets the host kill the group
# when ``timeout`` itself was killed.
WRAPPER = ('cd -- "$1" || exit 1\n'
           'timeout -s KILL "$2" bash -c "$4" &\n'
           'pg=$!; { echo $pg > "$3"; } 2>/dev/null\n'
           'wait $pg; rc=$?; kill -KILL -$pg 2>/dev/null; rm -f "$3"; exit $rc')
GRACE_S = 5.0  # host-side wait past the timeout before it kills the group itself


@dataclass(frozen=True)
class DockerConfig:
    """How to start a sandbox container. The defaults suit the base image."""

    image: str = DEFAULT_IMAGE
    """Image to run (build the default with ``agentgym sandbox build-image``)."""
    workdir: str = "/testbed"
    """Default working directory of commands; created (as a tmpfs when listed in ``tmpfs``)."""
    cpus: float = 1.0
    """CPU quota in cores."""
    memory_mb: int = 2048
    """Memory limit (tmpfs contents count against it); no swap."""
    pids: int = 256
    """Most processes and threads alive at once (stops fork bombs)."""
    network: str = "none"
    """Docker network mode; ``"none"`` = no network. Anything else is the caller's risk."""
    user: str | None = "1000:1000"
    """``uid:gid`` commands run as; ``None`` = the image's user (often root)."""
    read_only_root: bool = True
    """Mount the image read-only; only the ``tmpfs`` mounts are writable."""
    tmpfs: Mapping[str, int] = field(default_factory=lambda: {
        "/testbed": 1024, "/tmp": 512, "/home/agent": 128})
    """Writable tmpfs mounts: path -> size in MiB (owned by ``user``)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables for every command."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra container labels (``agentgym.*`` are always set)."""
    max_output_bytes: int = 1_000_000
    """Cap on each of stdout and stderr per command."""
    base_url: str | None = None
    """Docker engine address; ``None`` = ``$DOCKER_HOST``, the system socket, the private one."""

    def __post_init__(self) -> None:
        if not posixpath.isabs(self.workdir):
            raise ConfigError(f"workdir must be an absolute path, got {self.workdir!r}")
        for name, low in (("cpus", 0.01), ("memory_mb", 16), ("pids", 8),
                          ("max_output_bytes", 1)):
            if getattr(self, name) < low:
                raise ConfigError(f"{name} must be >= {low}, got {getattr(self, name)!r}")
        if self.read_only_root and not any(
                self.workdir == p or self.workdir.startswith(p.rstrip("/") + "/")
                for p in self.tmpfs):
            raise ConfigError(f"workdir {self.workdir!r} would be read-only: add it to tmpfs "
                              "or pass read_only_root=False")


def _container_env(config: DockerConfig) -> dict[str, str]:
    home = "/home/agent" if "/home/agent" in config.tmpfs else "/tmp"
    return {"HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PAGER": "cat",
            "GIT_PAGER": "cat", **GIT_IDENTITY, **config.env}


class DockerSandbox:
    """One container; see the module docstring.

    Args:
        config: How to start the container.
        client: A ``docker.DockerClient`` to share (default: one for ``config.base_url``).

    Example:
        >>> async def main():
        ...     async with DockerSandbox(DockerConfig()) as box:
        ...         await box.write_file("a.txt", "hi")
        ...         return (await box.exec("cat a.txt")).stdout
    """

    def __init__(self, config: DockerConfig = DockerConfig(), *, client: Any = None,
                 on_close: Callable[[DockerSandbox], None] | None = None) -> None:
        self.config = config
        self.workdir = config.workdir
        self._client = client
        self._on_close = on_close
        self.container_id: str | None = None
        self._closed = False

    # -- lifetime ---------------------------------------------------------------------
    async def start(self) -> DockerSandbox:
        """Create and start the container (idempotent)."""
        if self._closed:
            raise SandboxError("the sandbox was used after aclose(); start a new one")
        if self.container_id is None:
            starting = asyncio.ensure_future(in_thread(self._start_blocking))
            try:
                cid = await asyncio.shield(starting)
            except asyncio.CancelledError:
                # The thread still creates the container: remove it once it exists.
                starting.add_done_callback(self._discard_started)
                raise
            if self._closed:  # closed while starting
                await in_thread(remove_container, self._client, cid)
                raise SandboxError("the sandbox was closed while it started")
            self.container_id = cid
        return self

    def _discard_started(self, starting: asyncio.Future[str]) -> None:
        if not starting.cancelled() and starting.exception() is None:
            threading.Thread(target=remove_container, args=(self._client, starting.result()),
                             daemon=True).start()

    def _start_blocking(self) -> str:
        if self._client is None:
            url = self.config.base_url or find_engine()
            if url is None:
                raise SandboxError("no Docker engine is reachable: set DOCKER_HOST, start "
                                   "dockerd, or start a private one with "
                                   "agentgym.sandboxes.engine.start_engine()")
            hold_private_engine(url)  # a miner's lease ending must not stop it under us
            self._client = make_client(url)
        return create_container(self._client, self.config)

    async def aclose(self) -> None:
        """Remove the container (SIGKILL, then delete). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.container_id is not None:
            await in_thread(remove_container, self._client, self.container_id)
        if self._on_close is not None:
            self._on_close(self)

    async def __aenter__(self) -> DockerSandbox:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def alive(self) -> bool:
        """True while the container runs (False after ``kill -TERM`` of an unusual init)."""
        if self.container_id is None or self._closed:
            return False
        return await in_thread(self._alive_blocking)

    def _alive_blocking(self) -> bool:
        try:
            return bool(self._client.api.inspect_container(self.container_id)["State"]["Running"])
        except Exception:
            return False

    # -- commands ---------------------------------------------------------------------
    async def exec(self, cmd: str, *, timeout: float = 60.0,  # noqa: ASYNC109 - the protocol's
                   workdir: str | None = None, env: dict[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` with ``bash -c`` in ``workdir``; the timeout kills its process group."""
        if not isinstance(cmd, str):
            raise TypeError(f"cmd must be a str, got {type(cmd).__name__}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self._check_open()
        pidfile = f"/tmp/.agentgym-{uuid.uuid4().hex[:12]}.pid"
        argv = ["/bin/sh", "-c", WRAPPER, "sh", self._path(workdir or self.workdir),
                f"{timeout:.3f}", pidfile, cmd]
        start = time.monotonic()
        run = asyncio.ensure_future(in_thread(self._exec_blocking, argv, None, env, pidfile))
        try:
            # The in-container timeout normally ends the command; this is the backstop.
            code, out, err, cut = await asyncio.wait_for(asyncio.shield(run), timeout + GRACE_S)
        except TimeoutError:
            await in_thread(self._kill_group, pidfile)
            try:
                code, out, err, cut = await asyncio.wait_for(run, 10)
            except TimeoutError:
                await self.aclose()  # ends the stream; the container is not trustworthy now
                raise SandboxError(f"a command outlived its {timeout}s timeout and could not "
                                   "be killed; the sandbox was removed") from None
        except asyncio.CancelledError:
            # Do not leave the command running in a sandbox somebody may keep using.
            threading.Thread(target=self._kill_group, args=(pidfile,), daemon=True).start()
            raise
        timed_out = code == 137 and time.monotonic() - start >= timeout
        return ExecResult(-1 if timed_out else code, out.decode("utf-8", "replace"),
                          err.decode("utf-8", "replace"), timed_out=timed_out, truncated=cut)

    def _exec_blocking(self, argv: list[str], stdin: bytes | None,
                       env: Mapping[str, str] | None, pidfile: str | None = None,
                       cap: int | None = None) -> tuple[int, bytes, bytes, bool]:
        from docker.utils.socket import frames_iter

        api = self._client.api
        with _engine_errors(self):
            ex = api.exec_create(self.container_id, argv, stdin=stdin is not None,
                                 user=self.config.user or "",
                                 environment=[f"{k}={v}" for k, v in (env or {}).items()])
            sock = api.exec_start(ex["Id"], socket=True)
            try:
                raw = getattr(sock, "_sock", sock)
                if stdin is not None:
                    raw.sendall(stdin)
                    raw.shutdown(socket.SHUT_WR)  # EOF for the command's stdin
                cap = cap or self.config.max_output_bytes
                bufs = {1: bytearray(), 2: bytearray()}
                total, cut, killed = 0, False, False
                for stream, data in frames_iter(sock, tty=False):
                    total += len(data)
                    buf = bufs.get(stream, bufs[2])
                    room = cap - len(buf)
                    cut |= len(data) > room
                    buf += data[:max(room, 0)]
                    if total > KILL_AFTER_BYTES and pidfile and not killed:
                        killed = True  # e.g. `yes`: stop it instead of draining forever
                        threading.Thread(target=self._kill_group, args=(pidfile,),
                                         daemon=True).start()
            finally:
                _close_hijacked(sock)
            code = api.exec_inspect(ex["Id"])["ExitCode"]
            if code is None or code >= 128:
                self._raise_if_dead(code)
        return (code if code is not None else -1), bytes(bufs[1]), bytes(bufs[2]), cut

    def _raise_if_dead(self, code: int | None) -> None:
        """Raise SandboxError when a command ended because its container died.

        A command killed by a signal (137 = SIGKILL) or without an exit code is the agent's
        business (its own ``kill``, the OOM killer) only while the container runs; when the
        container died under it, the exit code, the cut-off output and any "missing" file
        stand for an infrastructure fault and must not be scored. The engine may record the
        container's end a moment after the exec stream closes, hence the short re-checks.
        """
        for attempt in range(4):
            state = self._client.api.inspect_container(self.container_id)["State"]
            if not state.get("Running") or state.get("Restarting") or state.get("Dead"):
                raise SandboxError(
                    f"container {str(self.container_id)[:12]}: the sandbox container is gone "
                    f"or stopped (status {state.get('Status')!r}, OOMKilled "
                    f"{state.get('OOMKilled')}) while a command ran (exit code {code}); the "
                    "command's result is not the agent's doing")
            if attempt < 3:
                time.sleep(0.05 * (attempt + 1))

    def _kill_group(self, pidfile: str) -> None:
        # Same uid as the command (root has no CAP_KILL in here); -1 = every process we may
        # signal except init, used when the pid file is gone.
        script = 'pg=$(cat "$1" 2>/dev/null) && kill -KILL "-$pg" 2>/dev/null || kill -KILL -1'
        try:
            self._exec_blocking(["/bin/sh", "-c", script, "sh", pidfile], None, None)
        except SandboxError:
            pass

    async def _run(self, argv: list[str], stdin: bytes | None = None,
                   limit: int | None = None) -> tuple[int, bytes, bytes, bool]:
        """Run a helper command (file transfer) under a fixed 300 s in-container timeout."""
        self._check_open()
        return await in_thread(self._exec_blocking, ["timeout", "-s", "KILL", "300", *argv],
                               stdin, None, None, limit)

    # -- files ------------------------------------------------------------------------
    def _path(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise ValueError(f"expected a non-empty sandbox path, got {path!r}")
        return posixpath.normpath(posixpath.join(self.workdir, path))

    async def write_file(self, path: str, content: str | bytes) -> None:
        """Write a file (parents created); text is encoded as UTF-8."""
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        target = self._path(path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        code, _, err, _ = await self._run(["sh", "-c", script, "sh", target], stdin=data)
        _raise_for(code, err, target)

    async def read_file(self, path: str, max_bytes: int = 64 * 2**20) -> bytes:
        """The bytes of a file; FileNotFoundError / IsADirectoryError / PermissionError."""
        target = self._path(path)
        code, out, err, cut = await self._run(["cat", "--", target], limit=max_bytes)
        _raise_for(code, err, target)
        if cut:
            raise OSError(f"{target} is larger than max_bytes={max_bytes}; pass a larger cap")
        return out

    async def copy_in(self, host_path: str, path: str) -> None:
        """Copy a host file or directory tree to ``path`` in the sandbox."""
        target = self._path(path)
        data, is_dir = await asyncio.to_thread(_tar_of, Path(host_path), posixpath.basename(target))
        dest = target if is_dir else posixpath.dirname(target)
        script = 'mkdir -p -- "$1" && tar -x -f - -C "$1"'
        code, _, err, _ = await self._run(["sh", "-c", script, "sh", dest], stdin=data)
        _raise_for(code, err, target)

    async def copy_out(self, path: str, host_path: str) -> None:
        """Copy a sandbox file or directory tree to ``host_path`` on the host."""
        target = self._path(path)
        parent, name = posixpath.split(target)
        code, out, err, cut = await self._run(["tar", "-c", "-f", "-", "-C", parent, "--", name],
                                              limit=1 << 30)
        _raise_for(code, err, target)
        if cut:
            raise OSError(f"{target} is larger than 1 GiB; copy smaller parts")
        await asyncio.to_thread(_untar_to, out, name, Path(host_path))

    async def diff(self, workdir: str | None = None) -> str:
        """``git diff`` of the working tree against HEAD, untracked files included."""
        return await git_diff(self, workdir or self.workdir)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox was used after aclose(); start a new one")
        if self.container_id is None:
            raise SandboxError("the sandbox is not started: use `async with DockerSandbox(...)`"
                               " or `await box.start()`")

    def __repr__(self) -> str:
        cid = (self.container_id or "not started")[:12]
        return f"<DockerSandbox {cid} image={self.config.image!r}>"


class _engine_errors:  # noqa: N801 - used as a context manager
    """Turn engine failures into SandboxError (an infrastructure fault, not the agent's)."""

    def __init__(self, box: Any) -> None:
        self.box = box

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, SandboxError):
            return False
        docker = docker_module()
        import requests

        if isinstance(exc, docker.errors.NotFound | docker.errors.APIError
                      | requests.exceptions.RequestException | OSError):
            msg = str(exc)
            if "is not running" in msg or isinstance(exc, docker.errors.NotFound):
                msg = ("the sandbox container is gone or stopped (killed from outside, or its "
                       f"init exited): {msg}")
            raise SandboxError(f"container {str(self.box.container_id)[:12]}: {msg}") from exc
        return False


def _close_hijacked(sock: Any) -> None:
    """Close an exec's hijacked socket and the HTTP response under it (no fd or GC noise)."""
    response, raw = getattr(sock, "_response", None), getattr(sock, "_sock", None)
    for part in (response, sock, raw):
        if part is not None:
            try:
                part.close()
            except (OSError, ValueError):
                pass


def _raise_for(code: int, err: bytes, path: str) -> None:
    if code == 0:
        return
    text = err.decode("utf-8", "replace").strip()
    if "No such file" in text:
        raise FileNotFoundError(f"no such file in the sandbox: {path}")
    if "Is a directory" in text:
        raise IsADirectoryError(f"is a directory in the sandbox: {path}")
    if "Permission denied" in text or "Read-only file system" in text:
        raise PermissionError(f"cannot write {path} in the sandbox: {text[:300]}")
    raise OSError(f"sandbox file operation on {path} failed (exit {code}): {text[:300]}")


def _tar_of(source: Path, name: str) -> tuple[bytes, bool]:
    if not source.exists():
        raise FileNotFoundError(f"no such host file or directory: {source}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(source, arcname="." if source.is_dir() else name)
    return buf.getvalue(), source.is_dir()


def _untar_to(data: bytes, name: str, host_path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")  # the sandbox is untrusted: no escaping links
        got = Path(tmp) / name
        if got.is_dir():
            shutil.copytree(got, host_path, symlinks=True, dirs_exist_ok=True)
        else:
            host_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(got, host_path)


# -- containers, owners and cleanup ---------------------------------------------------
def create_container(client: Any, config: DockerConfig) -> str:
    """Start one sandbox container; returns its id. Raises SandboxError."""
    docker = docker_module()
    uid, _, gid = (config.user or "0:0").partition(":")
    opts = f"uid={uid},gid={gid or uid},mode=0755"
    tmpfs = {p: f"size={mb}m,{'mode=1777' if p == '/tmp' else opts},exec"
             for p, mb in config.tmpfs.items()}
    labels = {**config.labels, LABEL: "1", OWNER_LABEL: owner_id()}
    start_reaper(engine_url(client), labels[OWNER_LABEL])
    container = None
    try:
        # create + start, not run: run would try to pull a missing image from a registry.
        container = client.containers.create(
            config.image, ["/bin/sh", "-c", INIT], labels=labels,
            network_mode=config.network, user=config.user or "", read_only=config.read_only_root,
            tmpfs=tmpfs, mem_limit=f"{config.memory_mb}m", memswap_limit=f"{config.memory_mb}m",
            nano_cpus=int(config.cpus * 1e9), pids_limit=config.pids, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], hostname="sandbox",
            environment=_container_env(config), working_dir=config.workdir,
            log_config={"type": "none"},
            ulimits=[docker.types.Ulimit(name="core", soft=0, hard=0)])
        container.start()
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"image {config.image!r} is not in the engine; build it with "
                           "`agentgym sandbox build-image` (or pass another image)") from exc
    except (docker.errors.APIError, OSError) as exc:
        if container is not None:
            remove_container(client, container.id)
        raise SandboxError(f"could not start a sandbox from {config.image!r}: {exc}") from exc
    return str(container.id)
