"""Docker sandboxes for SWE episodes, taken from the process's warm pool.

Shipped tasks run in the agentgym base image (``agentgym sandbox build-image``) with the
repository copied onto a tmpfs workdir at reset. SWE-bench-style tasks name their own image,
which already holds the repository at the workdir, so that directory must not be hidden by a
tmpfs: those containers get a writable root instead of a read-only one and run as the
image's user (SWE-bench images own the repository as root); they keep no network and the
same CPU, memory and process limits.

The pools are the process-wide ``shared_pool``s of :mod:`agentgym.sandboxes.pool`: an env
takes one started container per episode and removes it at the end, never reusing one.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from agentgym.envs.swe.task import SWETask
from agentgym.errors import MissingExtraError
from agentgym.sandboxes.base import Sandbox

if TYPE_CHECKING:
    from agentgym.sandboxes.docker import DockerConfig

POOL_SIZE = 2
"""Warm containers kept per image."""


def docker_config(task: SWETask, image: str | None = None) -> DockerConfig:
    """The container settings for ``task`` (see the module docstring)."""
    from agentgym.sandboxes.docker import DockerConfig

    base = DockerConfig()
    if task.image is not None:  # the repository is in the image: keep the workdir visible
        tmpfs = {p: mb for p, mb in base.tmpfs.items()
                 if p != task.workdir and not p.startswith(task.workdir.rstrip("/") + "/")}
        return dataclasses.replace(base, image=task.image, workdir=task.workdir,
                                   read_only_root=False, tmpfs=tmpfs, user=None)
    return dataclasses.replace(base, image=image or base.image, workdir=task.workdir)


async def open_docker_sandbox(task: SWETask, image: str | None = None, *,
                              pool_size: int = POOL_SIZE) -> Sandbox:
    """A started container for ``task`` from the shared warm pool.

    Args:
        task: The task (its ``image`` and ``workdir`` decide the container).
        image: Image for tasks that name none (default: the agentgym base image).
        pool_size: Warm containers the pool keeps for this image (set when it is created).

    Raises:
        MissingExtraError: The docker SDK is not installed.
        SandboxError: No engine is reachable or the container did not start.
    """
    try:
        import docker  # noqa: F401 - only to give the install hint early
    except ImportError as exc:
        raise MissingExtraError("docker", "swe", "the SWE env's Docker sandbox") from exc
    from agentgym.envs.swe.mining.recipe import ensure_task_image
    from agentgym.sandboxes.pool import shared_pool

    if task.image is not None:  # a mined package's image is built on first use
        await ensure_task_image(task.image)
    return await shared_pool(docker_config(task, image), size=pool_size).acquire()
