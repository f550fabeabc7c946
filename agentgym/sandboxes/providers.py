"""The sandbox-provider registry: where an env's ``sandbox="NAME"`` comes from.

    >>> from agentgym.sandboxes.providers import provider_names, get_provider
    >>> provider_names()[:2]
    ['docker', 'local']
    >>> get_provider("docker").isolation
    'container'

A provider opens one :class:`~agentgym.sandboxes.base.Sandbox` for a
:class:`SandboxRequest` (the episode's working directory and, where the files come in an
image, that image). Envs name providers and never branch on them; adding one (a remote
sandbox service, another container runtime) is one module calling :func:`register_provider`,
or the entry-point group ``agentgym.sandboxes``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agentgym.errors import ConfigError, MissingExtraError, did_you_mean
from agentgym.sandboxes.base import Sandbox

if TYPE_CHECKING:
    from agentgym.sandboxes.docker import DockerConfig

Isolation = Literal["none", "container"]


@dataclass(frozen=True)
class SandboxRequest:
    """What an env asks of a sandbox for one episode."""

    workdir: str
    """Working directory of the episode's commands (absolute, inside the sandbox)."""
    image: str | None = None
    """The image to run, which holds what the episode needs at ``workdir`` (None: the
    provider's default image, or ``default_image``)."""
    files_copied: bool = True
    """Whether the env copies the working files in itself (False: only ``image`` has them,
    so a provider that cannot run images cannot serve the request)."""
    default_image: str | None = None
    """Image for requests that name none (None: the provider's own default)."""
    pool_size: int = 2
    """Warm sandboxes a pooling provider keeps for this image."""


Opener = Callable[[SandboxRequest], Awaitable[Sandbox]]


@dataclass(frozen=True)
class ProviderInfo:
    """A registered sandbox provider."""

    name: str
    """The name envs take (``sandbox="docker"``)."""
    open: Opener
    """Opens one sandbox for a request."""
    isolation: Isolation
    """``none``: host subprocesses (development only); ``container``: its own container."""
    summary: str
    """One line for help texts."""


_PROVIDERS: dict[str, ProviderInfo] = {}
_PLUGINS_LOADED = False


def register_provider(name: str, open: Opener, *, isolation: Isolation,  # noqa: A002
                      summary: str) -> None:
    """Register a sandbox provider (a later registration of ``name`` replaces it, with a warning).

    Args:
        name: The name envs take.
        open: ``await open(request) -> Sandbox``.
        isolation: ``none`` or ``container``.
        summary: One line for help texts.
    """
    if name in _PROVIDERS and _PROVIDERS[name].open is not open:
        warnings.warn(f"sandbox provider {name!r} registered again; the new one replaces it",
                      stacklevel=2)
    _PROVIDERS[name] = ProviderInfo(name, open, isolation, summary)


def provider_names() -> list[str]:
    """Registered provider names, sorted."""
    _load_plugins()
    return sorted(_PROVIDERS)


def get_provider(name: str) -> ProviderInfo:
    """The provider registered as ``name``.

    Raises:
        ConfigError: No such provider (with a did-you-mean).
    """
    _load_plugins()
    if name not in _PROVIDERS:
        raise ConfigError(f"no sandbox provider named {name!r}; registered: "
                          f"{', '.join(provider_names())}{did_you_mean(name, _PROVIDERS)}")
    return _PROVIDERS[name]


async def open_sandbox(name: str, request: SandboxRequest) -> Sandbox:
    """Open a sandbox from provider ``name``."""
    return await get_provider(name).open(request)


def _load_plugins() -> None:
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="agentgym.sandboxes"):
        try:
            ep.load()
        except Exception as exc:  # a broken plug-in must not hide the built-in providers
            warnings.warn(f"sandbox plug-in {ep.name!r} ({ep.value}) failed to load: {exc!r}",
                          stacklevel=2)


# -- the built-in providers --------------------------------------------------------------

async def _local(request: SandboxRequest) -> Sandbox:
    from agentgym.sandboxes.local import LocalSandbox

    if not request.files_copied:
        raise ConfigError(f"the files live in the image {request.image!r}; the local sandbox "
                          "cannot run images, use sandbox='docker'")
    return LocalSandbox(workdir=request.workdir)


def docker_config(request: SandboxRequest) -> DockerConfig:
    """The container settings for a request.

    An image that holds the files at the workdir must not have that directory hidden by a
    tmpfs: it gets a writable root instead of a read-only one and runs as the image's user;
    no network and the same CPU, memory and process limits either way.
    """
    from agentgym.sandboxes.docker import DockerConfig

    base = DockerConfig()
    if request.image is not None:
        workdir = request.workdir.rstrip("/")
        tmpfs = {p: mb for p, mb in base.tmpfs.items()
                 if p != request.workdir and not p.startswith(workdir + "/")}
        return dataclasses.replace(base, image=request.image, workdir=request.workdir,
                                   read_only_root=False, tmpfs=tmpfs, user=None)
    return dataclasses.replace(base, image=request.default_image or base.image,
                               workdir=request.workdir)


async def _docker(request: SandboxRequest) -> Sandbox:
    try:
        import docker  # noqa: F401 - only to give the install hint early
    except ImportError as exc:
        raise MissingExtraError("docker", "swe", "the Docker sandbox") from exc
    from agentgym.sandboxes.pool import shared_pool

    return await shared_pool(docker_config(request), size=request.pool_size).acquire()


register_provider("local", _local, isolation="none",
                  summary="subprocesses on this machine in a temporary root (development)")
register_provider("docker", _docker, isolation="container",
                  summary="a container from the process's warm pool (no network, limits)")
