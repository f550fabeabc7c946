"""Hostile commands in a real container: each is contained, the sandbox goes on (or fails as an
infrastructure error), a bystander sandbox is untouched, and no container is left behind."""

from __future__ import annotations

import dataclasses
import hashlib
import time

import pytest

from agentgym.sandboxes.base import SandboxError

pytestmark = pytest.mark.docker
SMALL = dict(memory_mb=256, pids=64, tmpfs={"/testbed": 32, "/tmp": 16, "/home/agent": 8})


@pytest.fixture
async def pair(docker_config, docker_client):
    """(victim, bystander): the victim gets small limits; the bystander holds a file."""
    import asyncio

    from agentgym.sandboxes.docker import DockerSandbox
    from agentgym.sandboxes.engine import OWNER_LABEL, list_sandboxes, owner_id

    victim = DockerSandbox(dataclasses.replace(docker_config, **SMALL))
    bystander = DockerSandbox(docker_config)
    await asyncio.gather(victim.start(), bystander.start())
    payload = "precious\n" * 1000
    await bystander.write_file("keep.txt", payload)
    try:
        yield victim, bystander
        # The bystander still works, quickly, and its file is intact.
        start = time.monotonic()
        r = await bystander.exec("sha256sum keep.txt")
        assert r.ok and time.monotonic() - start < 10
        assert r.stdout.split()[0] == hashlib.sha256(payload.encode()).hexdigest()
    finally:
        await asyncio.gather(victim.aclose(), bystander.aclose())
    assert list_sandboxes(docker_client, **{OWNER_LABEL: owner_id()}) == []


async def test_fork_bomb_hits_the_pids_limit(pair):
    victim, _ = pair
    r = await victim.exec("bomb() { bomb | bomb & }; bomb; sleep 5", timeout=4)
    assert r.timed_out
    r = await victim.exec("ps -e --no-headers | wc -l")  # the bomb died with its group
    assert r.ok and int(r.stdout) < 10
    r = await victim.exec("cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat "
                          "/sys/fs/cgroup/pids.max")
    assert r.stdout.strip() == "64"


async def test_memory_hog_is_oom_killed(pair):
    victim, _ = pair
    r = await victim.exec("python3 -c 'x = []\nwhile True: x.append(bytearray(2**24))'",
                          timeout=60)
    assert r.exit_code == 137 and not r.timed_out  # SIGKILLed by the cgroup's OOM killer
    assert (await victim.exec("echo alive")).stdout == "alive\n"


async def test_infinite_loop_times_out(pair):
    victim, _ = pair
    start = time.monotonic()
    r = await victim.exec("while :; do :; done", timeout=2)
    assert r.timed_out and r.exit_code == -1 and time.monotonic() - start < 10
    assert (await victim.exec("echo alive")).stdout == "alive\n"


async def test_huge_file_fills_only_its_tmpfs(pair):
    victim, _ = pair
    r = await victim.exec("head -c 4G /dev/zero > big; echo rc=$?", timeout=60)
    assert "rc=1" in r.stdout and "No space left" in r.stderr
    r = await victim.exec("head -c 1M /dev/zero > /big 2>&1; head -c 1M /dev/zero > /var/big")
    assert r.exit_code != 0 and "Read-only file system" in r.stderr
    assert (await victim.exec("rm big && echo freed")).stdout == "freed\n"


async def test_no_network(pair):
    victim, _ = pair
    code = ("import socket\nfor host in ('1.1.1.1', '8.8.8.8', '172.17.0.1', '10.0.2.2'):\n"
            "    try:\n        socket.create_connection((host, 80), timeout=2)\n"
            "        print('reached', host)\n    except OSError as exc:\n"
            "        print('blocked', exc.errno)\n"
            "try:\n    socket.getaddrinfo('deb.debian.org', 80)\n    print('resolved')\n"
            "except OSError:\n    print('no dns')\n")
    await victim.write_file("/tmp/net.py", code)
    r = await victim.exec("python3 /tmp/net.py; ls /sys/class/net")
    assert "reached" not in r.stdout and "resolved" not in r.stdout
    assert r.stdout.count("blocked") == 4 and "no dns" in r.stdout
    assert r.stdout.split()[-1] == "lo"  # loopback is the only interface


async def test_host_files_are_out_of_reach(pair, tmp_path, docker_engine):
    victim, _ = pair
    canary = tmp_path / "canary.txt"
    canary.write_text("host secret")
    sock = docker_engine.removeprefix("unix://")
    r = await victim.exec(f"cat {canary}; ls {sock} /var/run/docker.sock; cat /etc/hostname; "
                          "mount -t tmpfs none /mnt; su -c id; id -u")
    assert "host secret" not in r.stdout
    assert r.stdout.split() == ["sandbox", "1000"]
    assert "No such file" in r.stderr and "mount" in r.stderr
    with pytest.raises(FileNotFoundError):
        await victim.read_file(str(canary))
    r = await victim.exec("cat /proc/1/status | grep CapEff")
    assert r.stdout.split()[-1] == "0000000000000000"  # no capabilities at all


async def test_killing_pid_1_does_not_end_the_sandbox(pair):
    victim, _ = pair
    await victim.exec("kill -9 1; kill -TERM 1; kill -HUP 1; pkill -9 sleep; pkill sh; "
                      "sleep 1; echo done")
    assert await victim.alive()
    assert (await victim.exec("echo alive")).stdout == "alive\n"
    # Everything we may signal, at once: the command dies, the sandbox does not.
    await victim.exec("kill -KILL -1")
    assert (await victim.exec("echo still")).stdout == "still\n"


async def test_container_killed_from_outside_is_an_infrastructure_error(pair, docker_client):
    victim, _ = pair
    docker_client.api.kill(victim.container_id)
    with pytest.raises(SandboxError, match="gone or stopped"):
        await victim.exec("echo hi")
