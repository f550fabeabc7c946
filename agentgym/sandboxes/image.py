"""The sandbox base image: Debian bookworm with Python 3, git and pytest, built with no registry.

Two ways to build it (both tag the result with a recipe hash, so a stale image is rebuilt):

- **debootstrap + docker import** (default, needs only the Debian package mirror): a
  ``minbase`` root filesystem with :data:`PACKAGES`, trimmed of docs and apt caches (every
  byte is copied per container start on the ``vfs`` storage driver), an ``agent`` user
  (uid 1000), then ``tar | docker import``.
- **from a base image** (``--from python:3.11-slim``, when a registry is reachable): a
  two-line Dockerfile that apt-installs the same tools and adds the user.

CLI (:mod:`agentgym.sandboxes.cli`): ``agentgym sandbox build-image [--name NAME] [--from BASE]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SUITE = "bookworm"
PACKAGES = ("python3-minimal", "python3", "python3-pytest", "git", "patch", "procps")
"""Debian packages in the image (bash, coreutils, tar, sed, grep come with minbase)."""
DEFAULT_IMAGE = "agentgym-sandbox:bookworm"
RECIPE_LABEL = "agentgym.recipe"
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
        "var/cache/apt", "var/lib/apt/lists", "var/log")
GITCONFIG = """[safe]
\tdirectory = *
[init]
\tdefaultBranch = main
[user]
\tname = agentgym
\temail = agentgym@localhost
"""
Log = Callable[[str], None]


def recipe(base: str | None = None, packages: tuple[str, ...] = PACKAGES) -> str:
    """A short hash of what goes into the image; a change means a rebuild."""
    text = f"v2|{SUITE}|{base or 'debootstrap'}|{','.join(packages)}|{GITCONFIG}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def image_ready(client: Any, name: str = DEFAULT_IMAGE, base: str | None = None) -> bool:
    """True when ``name`` exists and was built from the current recipe."""
    docker = _docker()
    try:
        labels = client.images.get(name).labels or {}
    except docker.errors.ImageNotFound:
        return False
    return labels.get(RECIPE_LABEL) == recipe(base)


@contextlib.contextmanager
def build_lock(client: Any) -> Iterator[None]:
    """Hold the machine-wide image-build lock (concurrent test runs build once)."""
    from agentgym.sandboxes.engine import default_root

    root = default_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "build.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test runs build once
        yield


def ensure_image(client: Any, name: str = DEFAULT_IMAGE, *, base: str | None = None,
                 log: Log = print) -> str:
    """Build ``name`` unless an up-to-date one exists; returns the name."""
    if image_ready(client, name, base):
        return name
    with build_lock(client):
        if not image_ready(client, name, base):
            build_image(client, name, base=base, log=log)
    return name


def build_image(client: Any, name: str = DEFAULT_IMAGE, *, base: str | None = None,
                mirror: str | None = None, log: Log = print) -> str:
    """Build the sandbox image into the engine behind ``client``.

    Args:
        client: A ``docker.DockerClient``.
        name: ``repository:tag`` to create (replaced if present).
        base: Build ``FROM`` this image (Debian/Ubuntu based) instead of debootstrapping.
        mirror: Debian mirror for debootstrap (default: the one apt already uses).
        log: Progress lines go here.

    Returns:
        ``name``.

    Raises:
        SandboxError: debootstrap or the engine failed (the message holds their output).
    """
    start = time.monotonic()
    if base is None:
        _build_debootstrap(client, name, mirror or apt_mirror(), log)
    else:
        _build_from(client, name, base, log)
    log(f"built {name} in {time.monotonic() - start:.0f}s")
    return name


def apt_mirror() -> str:
    """The Debian mirror this machine's apt sources name (deb.debian.org if none)."""
    for path in (*Path("/etc/apt/sources.list.d").glob("*.sources"),
                 Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list")):
        with contextlib.suppress(OSError):
            text = path.read_text()
            for url in re.findall(r"(?:^URIs:\s*|^deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.M):
                if "security" not in url:
                    return url
    return "http://deb.debian.org/debian"


def _build_debootstrap(client: Any, name: str, mirror: str, log: Log) -> None:
    from agentgym.sandboxes.base import SandboxError

    if shutil.which("debootstrap") is None:
        raise SandboxError("building the sandbox image needs debootstrap (apt-get install "
                           "debootstrap), or pass --from BASE_IMAGE where a registry is reachable")
    with tempfile.TemporaryDirectory(prefix="agentgym-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"debootstrap {SUITE} ({', '.join(PACKAGES)}) from {mirror} ...")
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
               str(rootfs), mirror]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxError(f"debootstrap failed (exit {proc.returncode}): "
                               f"{(proc.stdout + proc.stderr)[-1500:]}")
        _prepare_rootfs(rootfs)
        log(f"importing {name} ...")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                               stdout=subprocess.PIPE)
        try:
            client.api.import_image(src=tar.stdout, repository=name, stream_src=True,
                                    changes=_changes(None))
        finally:
            tar.stdout.close()  # type: ignore[union-attr]
            tar.wait()
        if not image_ready(client, name):
            raise SandboxError(f"docker import did not produce {name}")


def _prepare_rootfs(rootfs: Path) -> None:
    for rel in TRIM:
        for child in (rootfs / rel).glob("*"):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    with open(rootfs / "etc/passwd", "a") as f:
        f.write("agent:x:1000:1000:agent:/home/agent:/bin/bash\n")
    with open(rootfs / "etc/group", "a") as f:
        f.write("agent:x:1000:\n")
    (rootfs / "etc/gitconfig").write_text(GITCONFIG)
    python = rootfs / "usr/bin/python"
    if not python.exists():  # `python -m pytest` is what people and models type
        python.symlink_to("python3")
    for d in ("home/agent", "testbed"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
        shutil.chown(rootfs / d, 1000, 1000)


def _changes(base: str | None) -> list[str]:
    return [f"LABEL {RECIPE_LABEL}={recipe(base)}", "ENV LANG=C.UTF-8",
            "ENV PYTHONDONTWRITEBYTECODE=1", "WORKDIR /testbed", 'CMD ["/bin/bash"]']


def _build_from(client: Any, name: str, base: str, log: Log) -> None:
    from agentgym.sandboxes.base import SandboxError

    docker = _docker()
    gitconfig = GITCONFIG.replace("\t", "    ").replace("\n", "\\n")
    dockerfile = "\n".join([
        f"FROM {base}", "USER root",
        "RUN command -v apt-get >/dev/null || { echo 'the base image must be Debian/Ubuntu "
        "based (apt-get)'; exit 1; } && apt-get update && DEBIAN_FRONTEND=noninteractive "
        f"apt-get install -y --no-install-recommends {' '.join(PACKAGES)} "
        "&& rm -rf /var/lib/apt/lists/*",
        "RUN (getent passwd 1000 >/dev/null || useradd -m -u 1000 -s /bin/bash agent) "
        f"&& mkdir -p /testbed /home/agent && chown 1000:1000 /testbed /home/agent "
        f"&& printf '{gitconfig}' > /etc/gitconfig "
        "&& { command -v python >/dev/null || ln -s python3 /usr/bin/python; }",
        *_changes(base)])
    log(f"building {name} FROM {base} ...")
    try:
        # The private engine has no bridge network; builds use the host's.
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=name, rm=True,
                            network_mode="host")
    except (docker.errors.BuildError, docker.errors.APIError) as exc:
        logs = "".join(str(x.get("stream", "")) for x in getattr(exc, "build_log", []) or [])
        raise SandboxError(f"building {name} from {base} failed: {exc} {logs[-1500:]}") from exc


def _docker() -> Any:
    from agentgym.sandboxes.engine import docker_module

    return docker_module()
