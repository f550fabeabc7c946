"""A warm pool of Docker sandboxes: episodes take a started container instead of waiting.

For each image the pool keeps ``size`` containers started ahead of time and refills in the
background as they are taken. A sandbox is used by one episode and then discarded
(``aclose`` removes the container), so no state ever passes between episodes: "reset" is
"take a fresh one". When the pool is empty ``acquire`` starts a container itself (a cold
start, counted in :attr:`SandboxPool.stats`).

Cleanup is guaranteed at every level: ``async with`` (normal exit, exceptions, cancellation)
removes the warm containers and every sandbox still checked out; the per-owner watchdog of
:mod:`agentgym.sandboxes.docker` removes them if the process dies (SIGTERM, SIGKILL); and
entering a pool sweeps containers left by dead processes.

Example:
    >>> async def main():
    ...     async with SandboxPool(DockerConfig(), size=2) as pool:
    ...         async with await pool.acquire() as box:
    ...             return (await box.exec("python3 -V")).stdout
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError
from agentgym.sandboxes.base import SandboxError
from agentgym.sandboxes.docker import DockerConfig, DockerSandbox, create_container
from agentgym.sandboxes.engine import client as make_client
from agentgym.sandboxes.engine import find_engine, in_thread, remove_container, sweep

log = logging.getLogger(__name__)


@dataclass
class PoolStats:
    """Counters since the pool opened."""

    warm_hits: int = 0
    """Acquires served by a pre-started container."""
    cold_starts: int = 0
    """Acquires that had to start a container (pool empty)."""
    started: int = 0
    """Containers the pool started in the background."""
    failures: int = 0
    """Background starts that failed (the engine is retried with back-off)."""
    swept: int = 0
    """Leftover containers of dead processes removed on entry."""


class SandboxPool:
    """Pre-started sandboxes per image; see the module docstring.

    Args:
        config: Container settings; ``config.image`` is warmed on entry.
        size: Warm containers kept per image (0 = no warming, every acquire is cold).
        images: More images to keep warm besides ``config.image``.
        max_starting: Container starts in flight at once (they are disk-heavy).
    """

    def __init__(self, config: DockerConfig | None = None, *, size: int = 2,
                 images: tuple[str, ...] = (), max_starting: int = 2) -> None:
        config = config or DockerConfig()
        if size < 0 or max_starting < 1:
            raise ConfigError(f"need size >= 0 and max_starting >= 1, got size={size}, "
                              f"max_starting={max_starting}")
        self.config = config
        self.size = size
        self.stats = PoolStats()
        self._warm: dict[str, deque[str]] = {img: deque() for img in (config.image, *images)}
        self._starting: dict[str, int] = dict.fromkeys(self._warm, 0)
        self._out: set[DockerSandbox] = set()
        self._client: Any = None
        self._wake = asyncio.Event()
        self._warmed = asyncio.Event()
        self._filler: asyncio.Task[None] | None = None
        self._gate = asyncio.Semaphore(max_starting)
        self._tasks: set[asyncio.Task[None]] = set()
        self._backoff = 0.5
        self._start_lock = asyncio.Lock()
        self._closed = False

    async def __aenter__(self) -> SandboxPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Connect, sweep leftovers of dead processes, and begin warming (once)."""
        async with self._start_lock:  # concurrent first acquires start it once
            if self._client is not None:
                return
            url = self.config.base_url or await in_thread(find_engine)
            if url is None:
                raise SandboxError("no Docker engine is reachable: set DOCKER_HOST or start "
                                   "one (`agentgym sandbox engine`)")
            client = make_client(url)
            self.stats.swept = await in_thread(sweep, client)
            self._client = client
            self._filler = asyncio.create_task(self._fill(), name="sandbox-pool-filler")

    async def acquire(self, image: str | None = None) -> DockerSandbox:
        """A started sandbox for ``image`` (default ``config.image``); ``aclose`` it after use.

        Raises:
            SandboxError: The pool is closed or no container could be started.
        """
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        if self._client is None:
            await self.start()
        image = image or self.config.image
        config = dataclasses.replace(self.config, image=image)
        queue = self._warm.setdefault(image, deque())
        self._starting.setdefault(image, 0)
        box = DockerSandbox(config, client=self._client, on_close=self._out.discard)
        while queue:
            cid = queue.popleft()
            box.container_id = cid
            if await box.alive():
                self.stats.warm_hits += 1
                break
            await in_thread(remove_container, self._client, cid)  # died while waiting
            box.container_id = None
        self._out.add(box)
        self._wake.set()
        if box.container_id is None:
            self.stats.cold_starts += 1
            try:
                await box.start()
            except BaseException:
                self._out.discard(box)
                raise
        return box

    async def _fill(self) -> None:
        while not self._closed:
            for image, queue in self._warm.items():
                for _ in range(self.size - len(queue) - self._starting[image]):
                    self._starting[image] += 1
                    task = asyncio.create_task(self._start_one(image))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            self._wake.clear()
            await self._wake.wait()

    async def _start_one(self, image: str) -> None:
        config = dataclasses.replace(self.config, image=image)
        cid = None
        try:
            async with self._gate:
                if self._closed:
                    return
                cid = await in_thread(create_container, self._client, config)
            if self._closed:  # the pool closed while this one started
                await in_thread(remove_container, self._client, cid)
                return
            self._warm[image].append(cid)
            self._warmed.set()
            self.stats.started += 1
            self._backoff = 0.5
        except SandboxError as exc:
            self.stats.failures += 1
            log.warning("warm sandbox for %s failed to start: %s", image, exc)
            await asyncio.sleep(self._backoff)  # an engine in trouble: do not hammer it
            self._backoff = min(self._backoff * 2, 30.0)
        finally:
            self._starting[image] -= 1
            self._wake.set()

    def warm_count(self, image: str | None = None) -> int:
        """Started containers waiting for an acquire."""
        return len(self._warm.get(image or self.config.image, ()))

    async def wait_warm(self) -> None:
        """Wait until every image has ``size`` warm containers (for benchmarks and tests)."""
        while any(len(q) < self.size for q in self._warm.values()):
            self._warmed.clear()
            await self._warmed.wait()

    async def aclose(self) -> None:
        """Stop warming and remove every container the pool started or handed out."""
        if self._closed:
            return
        self._closed = True
        if self._filler is not None:
            self._filler.cancel()
        # In-flight starts are awaited, not cancelled (a cancelled start would lose the id of
        # the container its thread still creates); they see _closed and remove it. Shielded
        # so that a second cancellation cannot skip the cleanup.
        pending = [t for t in (self._filler, *self._tasks) if t is not None]
        await asyncio.shield(asyncio.gather(*pending, return_exceptions=True))
        ids = [cid for q in self._warm.values() for cid in q]
        for q in self._warm.values():
            q.clear()
        boxes = list(self._out)
        if self._client is None:
            return
        await asyncio.shield(self._remove(ids, boxes))

    async def _remove(self, ids: list[str], boxes: list[DockerSandbox]) -> None:
        for box in boxes:
            with contextlib.suppress(SandboxError):
                await box.aclose()
        for cid in ids:
            with contextlib.suppress(SandboxError):
                await in_thread(remove_container, self._client, cid)


_shared: dict[tuple[int, str], SandboxPool] = {}


def shared_pool(config: DockerConfig | None = None, *, size: int = 2) -> SandboxPool:
    """The process's pool for ``config`` on the running event loop, created on first use.

    For envs, which hold one sandbox per episode and must not own the pool: ``box = await
    shared_pool(DockerConfig(image=...)).acquire()``, then ``await box.aclose()`` at the end
    of the episode. Close the pools with :func:`close_shared_pools` (or let the owner
    watchdog remove their containers when the process exits).
    """
    config = config or DockerConfig()
    key = (id(asyncio.get_running_loop()), repr(sorted(dataclasses.asdict(config).items())))
    pool = _shared.get(key)
    if pool is None or pool._closed:
        pool = _shared[key] = SandboxPool(config, size=size)
    return pool


async def close_shared_pools() -> None:
    """Close every shared pool of the running event loop."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _shared if k[0] == loop_id]:
        await _shared.pop(key).aclose()
