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

from typing import TYPE_CHECKING

from agentgym.envs.swe.task import SWETask
from agentgym.sandboxes.base import Sandbox
from agentgym.sandboxes.providers import SandboxRequest, get_provider
from agentgym.sandboxes.providers import docker_config as request_config

if TYPE_CHECKING:
    from agentgym.sandboxes.docker import DockerConfig

POOL_SIZE = 2
"""Warm containers kept per image."""


def sandbox_request(task: SWETask, image: str | None = None, *,
                    pool_size: int = POOL_SIZE) -> SandboxRequest:
    """What ``task`` asks of its sandbox: its workdir, and its image when it names one."""
    return SandboxRequest(task.workdir, image=task.image, default_image=image,
                          files_copied=task.repo_dir is not None, pool_size=pool_size)


def docker_config(task: SWETask, image: str | None = None) -> DockerConfig:
    """The container settings for ``task`` (see the module docstring)."""
    return request_config(sandbox_request(task, image))


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
    return await open_task_sandbox("docker", task, image, pool_size=pool_size)


async def open_task_sandbox(provider: str, task: SWETask, image: str | None = None, *,
                            pool_size: int = POOL_SIZE) -> Sandbox:
    """A sandbox for ``task`` from the registered ``provider`` (``local``, ``docker``, ...).

    A mined package's image is built on first use before a container provider runs it.
    """
    info = get_provider(provider)
    if task.image is not None and info.isolation == "container":
        from agentgym.envs.swe.mining.recipe import ensure_task_image

        await ensure_task_image(task.image)
    return await info.open(sandbox_request(task, image, pool_size=pool_size))
