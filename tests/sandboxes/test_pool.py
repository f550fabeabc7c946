"""The warm pool and cleanup: warm hits, refills, discard-on-close, and no container left behind
after normal exit, exceptions, cancellation, SIGTERM or SIGKILL of the owning process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.docker


_EARLIER: set[str] = set()
"""This process's containers from before these tests (a SWE recipe's warm container that an
earlier test on the same xdist worker keeps for the process's life): not the pool's."""


@pytest.fixture(autouse=True, scope="module")
def _earlier_containers(docker_client):
    _EARLIER.update(c.id for c in _ours(docker_client))


def _ours(client, owner=None):
    from agentgym.sandboxes.engine import OWNER_LABEL, list_sandboxes, owner_id

    return [c for c in list_sandboxes(client, **{OWNER_LABEL: owner or owner_id()})
            if c.id not in _EARLIER]


async def test_warm_acquire_refill_and_discard(docker_config, docker_client):
    from agentgym.sandboxes.pool import SandboxPool

    async with SandboxPool(docker_config, size=2) as pool:
        await asyncio.wait_for(pool.wait_warm(), 120)
        box = await pool.acquire()
        assert pool.stats.warm_hits == 1 and pool.stats.cold_starts == 0
        await box.write_file("state.txt", "episode 1")
        first = box.container_id
        await box.aclose()  # reset = discard: the container is gone
        assert first not in {c.id for c in _ours(docker_client)}
        await asyncio.wait_for(pool.wait_warm(), 120)  # refilled in the background
        assert pool.warm_count() == 2
        boxes = [await pool.acquire() for _ in range(3)]  # one more than warm: a cold start
        assert pool.stats.warm_hits == 3 and pool.stats.cold_starts == 1
        for b in boxes:  # a fresh container never sees an earlier episode's files
            assert (await b.exec("cat state.txt")).exit_code != 0
        assert len({b.container_id for b in boxes}) == 3
    # Closing the pool removed the warm ones and the three still checked out.
    assert _ours(docker_client) == []


async def test_exception_and_cancellation_clean_up(docker_config, docker_client):
    from agentgym.sandboxes.pool import SandboxPool

    with pytest.raises(RuntimeError, match="episode crashed"):
        async with SandboxPool(docker_config, size=1) as pool:
            await pool.acquire()
            raise RuntimeError("episode crashed")
    assert _ours(docker_client) == []

    started = asyncio.Event()

    async def episode() -> None:
        async with SandboxPool(docker_config, size=1) as pool:
            box = await pool.acquire()
            started.set()
            await box.exec("sleep 60", timeout=120)

    task = asyncio.create_task(episode())
    await asyncio.wait_for(started.wait(), 120)
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _ours(docker_client) == []


OWNER_SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from agentgym.sandboxes.docker import DockerConfig
    from agentgym.sandboxes.engine import owner_id
    from agentgym.sandboxes.pool import SandboxPool

    async def main():
        pool = SandboxPool(DockerConfig(image=sys.argv[1]), size=2)
        await pool.start()
        box = await pool.acquire()
        await pool.wait_warm()
        print(owner_id(), flush=True)
        await box.exec("sleep 600", timeout=900)

    asyncio.run(main())
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_owner_death_removes_its_containers(sig, docker_engine, sandbox_image, docker_client):
    proc = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT, sandbox_image],
                            stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        owner = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert owner, "the owner process did not start its pool"
        assert len(_ours(docker_client, owner)) == 3  # one checked out, two warm
        proc.send_signal(sig)
        proc.wait(30)
        deadline = time.monotonic() + 60
        while _ours(docker_client, owner) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert _ours(docker_client, owner) == []
    finally:
        proc.kill()
        proc.wait()


async def test_startup_sweep_removes_leftovers_of_dead_owners(docker_config, docker_client,
                                                             monkeypatch):
    import socket
    import uuid

    from agentgym.sandboxes.engine import OWNER_LABEL
    from agentgym.sandboxes.pool import SandboxPool

    # A host name of this test's own: another worker's pool starting meanwhile judges the
    # leftover another machine's and leaves it to this pool's sweep, so the count is exact.
    host = f"sweep-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    dead = f"{host}:{2**22 + 7}:0"  # a pid above pid_max: never alive
    leftover = docker_client.containers.create(
        docker_config.image, ["sleep", "600"], labels={"agentgym.sandbox": "1",
                                                       OWNER_LABEL: dead})
    alive_elsewhere = docker_client.containers.create(
        docker_config.image, ["sleep", "600"], labels={"agentgym.sandbox": "1",
                                                       OWNER_LABEL: "other-host:1:1"})
    try:
        async with SandboxPool(docker_config, size=0) as pool:
            assert pool.stats.swept == 1
        ids = {c.id for c in docker_client.containers.list(all=True)}
        assert leftover.id not in ids and alive_elsewhere.id in ids
    finally:
        alive_elsewhere.remove(force=True)


async def test_shared_pool_is_one_per_config(docker_config, docker_client):
    import dataclasses

    from agentgym.sandboxes.pool import close_shared_pools, shared_pool

    pool = shared_pool(docker_config, size=1)
    assert shared_pool(docker_config) is pool
    assert shared_pool(dataclasses.replace(docker_config, cpus=0.5)) is not pool
    async with await pool.acquire() as box:
        assert (await box.exec("echo hi")).stdout == "hi\n"
    await close_shared_pools()
    assert _ours(docker_client) == []


async def test_cancelled_cold_start_leaves_no_container(docker_config, docker_client):
    from agentgym.sandboxes.docker import DockerSandbox
    from agentgym.sandboxes.engine import OWNER_LABEL, owner_id

    before = {c.id for c in _ours(docker_client)}
    since = int(time.time()) - 1

    def lifecycle() -> tuple[set[str], set[str]]:
        """Ids of this process's containers created, and destroyed, since the test began."""
        seen: dict[str, set[str]] = {"create": set(), "destroy": set()}
        for event in docker_client.events(
                since=since, until=int(time.time()), decode=True,
                filters={"type": "container", "label": f"{OWNER_LABEL}={owner_id()}"}):
            if event.get("Action") in seen:
                seen[event["Action"]].add(event["id"])
        return seen["create"] - before, seen["destroy"]

    box = DockerSandbox(docker_config)
    task = asyncio.create_task(box.start())
    await asyncio.sleep(0.05)  # the container is being created in a thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The thread goes on to create the container (on a loaded machine, after the cancel), then
    # it is removed: wait for both, bounded against a hang.
    deadline = time.monotonic() + 120
    created, destroyed = lifecycle()
    while not (created and created <= destroyed) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)  # noqa: ASYNC110 - polls the engine
        created, destroyed = lifecycle()
    assert created and created <= destroyed, (created, destroyed)
    assert _ours(docker_client) == []
