"""DockerSandbox on a real engine: the Sandbox contract, limits, timeouts, caps, files."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest

from agentgym.errors import ConfigError, MissingExtraError
from agentgym.sandboxes.base import Sandbox, SandboxError


def test_config_rejects_bad_values():
    from agentgym.sandboxes.docker import DockerConfig

    with pytest.raises(ConfigError, match="workdir must be an absolute"):
        DockerConfig(workdir="testbed")
    with pytest.raises(ConfigError, match="memory_mb must be >= 16"):
        DockerConfig(memory_mb=1)
    with pytest.raises(ConfigError, match="would be read-only"):
        DockerConfig(workdir="/srv", read_only_root=True)
    DockerConfig(workdir="/srv", read_only_root=False)  # a writable root is the caller's choice


def test_missing_sdk_names_the_extra(monkeypatch):
    from agentgym.sandboxes.engine import docker_module

    monkeypatch.setitem(sys.modules, "docker", None)  # import docker -> ImportError
    with pytest.raises(MissingExtraError, match=r"agentgym\[swe\]"):
        docker_module()


def test_a_process_using_the_private_engine_keeps_it_from_being_stopped(tmp_path):
    """Another process's lease ending (it tries an exclusive lock before stopping the
    engine) cannot stop the private engine while a process that uses it lives."""
    import subprocess

    from agentgym.sandboxes import engine

    root = tmp_path / "d"
    root.mkdir()
    last_one_out = ("import fcntl, sys; f = open(sys.argv[1], 'a+'); "
                    "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)")
    lock = str(root / "lease.lock")
    engine.hold_private_engine("unix:///var/run/elsewhere.sock", root)  # not the private one
    assert subprocess.run([sys.executable, "-c", last_one_out, lock]).returncode == 0
    engine.hold_private_engine(engine.private_socket(root), root)
    try:
        done = subprocess.run([sys.executable, "-c", last_one_out, lock], capture_output=True)
        assert done.returncode != 0 and b"BlockingIOError" in done.stderr
    finally:
        engine._HELD.pop(root).close()
    assert subprocess.run([sys.executable, "-c", last_one_out, lock]).returncode == 0


def test_an_engine_started_by_hand_outlives_the_last_lease(tmp_path, monkeypatch):
    """`agentgym sandbox engine` starts an engine for the user's later commands: a command's
    lease ending (say `sandbox build-image`) must not stop it; `--stop` does, and after it
    the last lease out stops the engine it started again."""
    from agentgym.sandboxes import engine

    root = tmp_path / "d"
    stopped, real_stop = [], engine.stop_engine
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("AGENTGYM_KEEP_ENGINE", raising=False)
    monkeypatch.setattr(engine, "SYSTEM_SOCKET", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr(engine, "start_engine", lambda r: engine.private_socket(r))
    monkeypatch.setattr(engine, "stop_engine", lambda r=None: stopped.append(r) or True)
    root.mkdir()
    (root / "dockerd.pid").write_text("123")
    engine.keep_engine(root)
    with engine.engine_lease(root) as url:
        assert url == engine.private_socket(root)
    assert stopped == []
    (root / "dockerd.pid").write_text("456")  # a later daemon: the mark is stale
    with engine.engine_lease(root):
        pass
    assert stopped == [root]
    stopped.clear()
    engine.keep_engine(root)
    (root / "dockerd.pid").unlink()  # no daemon ran here, and none is to be signalled
    assert real_stop(root) is False and not (root / "kept").exists()
    with engine.engine_lease(root):
        pass
    assert stopped == [root]


def test_ping_false_without_engine(tmp_path):
    from agentgym.sandboxes.engine import ping

    assert not ping(f"unix://{tmp_path}/nothing.sock")



@pytest.fixture
async def box(docker_config):
    from agentgym.sandboxes.docker import DockerSandbox

    async with DockerSandbox(docker_config) as b:
        yield b


@pytest.mark.docker
async def test_exec_contract(box):
    assert isinstance(box, Sandbox)
    r = await box.exec("echo out; echo err >&2; id -un; pwd; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out\nagent\n/testbed\n",
                                                              "err\n", False)
    r = await box.exec("echo $FOO; pwd", workdir="/tmp", env={"FOO": "bar"})
    assert r.stdout == "bar\n/tmp\n" and r.ok
    r = await box.exec("pwd", workdir="/nowhere")
    assert r.exit_code == 1 and "/nowhere" in r.stderr
    r = await box.exec("python -m pytest --version && git --version && patch --version")
    assert r.ok and "pytest" in r.stdout + r.stderr and "git version" in r.stdout
    r = await box.exec("touch /usr/x")  # read-only root
    assert r.exit_code != 0 and "Read-only file system" in r.stderr


@pytest.mark.docker
async def test_a_command_too_long_to_start_is_an_observation(box):
    """Past the kernel's limit on one argument (128 KiB) the exec fails in the container: the
    command's result says so, as the local sandbox's does, and the sandbox goes on."""
    result = await box.exec("echo " + "a" * 200_000 + " | wc -c")
    assert result.exit_code != 0 and "argument list too long" in result.stderr
    assert (await box.exec("echo " + "a" * 100_000 + " | wc -c")).stdout == "100001\n"


@pytest.mark.docker
async def test_timeout_kills_the_process_group(box):
    start = time.monotonic()
    r = await box.exec("sleep 60 & sleep 60 & sleep 60; echo never", timeout=1.5)
    assert r.timed_out and r.exit_code == -1 and "never" not in r.stdout
    assert time.monotonic() - start < 8
    r = await box.exec("ps -eo args | grep -c '^sleep 60' || true")
    assert r.stdout.strip() == "0"  # the background children died with the group
    assert (await box.exec("echo still here")).stdout == "still here\n"
    # Background children die when the command ends, so they cannot hold the call open...
    start = time.monotonic()
    r = await box.exec("sleep 60 & echo bg", timeout=60)
    assert r.stdout == "bg\n" and r.ok and time.monotonic() - start < 5
    # ...and one that left the process group (setsid) does not hold the call either; it lives
    # on inside the pids limit until the container is discarded.
    start = time.monotonic()
    r = await box.exec("setsid sleep 60 & echo escaped", timeout=1)
    assert r.stdout == "escaped\n" and time.monotonic() - start < 5


@pytest.mark.docker
async def test_output_is_capped(docker_config):
    from agentgym.sandboxes.docker import DockerSandbox

    config = dataclasses.replace(docker_config, max_output_bytes=1000)
    async with DockerSandbox(config) as b:
        r = await b.exec("head -c 5000 /dev/zero | tr '\\0' a; head -c 3000 /dev/zero >&2")
        assert r.truncated and r.stdout == "a" * 1000 and len(r.stderr) == 1000 and r.ok
        start = time.monotonic()
        r = await b.exec("yes", timeout=60)  # a flood is killed, not drained for a minute
        assert r.truncated and r.exit_code == 137 and time.monotonic() - start < 30


@pytest.mark.docker
async def test_files_copy_and_diff(box, tmp_path):
    await box.write_file("pkg/a.txt", "hello\n")
    assert await box.read_file("/testbed/pkg/a.txt") == b"hello\n"
    await box.write_file("/tmp/bin.dat", bytes(range(256)))
    assert await box.read_file("/tmp/bin.dat") == bytes(range(256))
    with pytest.raises(FileNotFoundError):
        await box.read_file("missing.txt")
    with pytest.raises(IsADirectoryError):
        await box.read_file("pkg")
    with pytest.raises(PermissionError):
        await box.write_file("/etc/passwd", "root::0:0::/:/bin/sh\n")

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "m.py").write_text("print('copied')\n")
    await box.copy_in(str(src), "/testbed/proj")
    await box.copy_in(str(src / "sub" / "m.py"), "/testbed/single.py")
    r = await box.exec("python3 proj/sub/m.py && python3 single.py")
    assert r.stdout == "copied\ncopied\n"
    with pytest.raises(FileNotFoundError):
        await box.copy_in(str(tmp_path / "nope"), "/testbed/x")

    await box.copy_out("/testbed/proj", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "m.py").read_text() == "print('copied')\n"
    await box.copy_out("/testbed/pkg/a.txt", str(tmp_path / "a.txt"))
    assert (tmp_path / "a.txt").read_text() == "hello\n"

    assert (await box.exec("git init -q && git add -A && git commit -qm base")).ok
    await box.write_file("pkg/a.txt", "hello\nworld\n")
    await box.write_file("new.py", "x = 1\n")
    await box.exec("git add new.py")  # the agent's own staging must not change the diff
    patch = await box.diff()
    assert "+world" in patch and "new file mode" in patch and "+x = 1" in patch
    assert (await box.exec("git diff --cached --name-only")).stdout == "new.py\n"


@pytest.mark.docker
async def test_closed_or_killed_sandbox_raises_sandbox_error(docker_config, docker_client):
    from agentgym.sandboxes.docker import DockerSandbox

    b = DockerSandbox(docker_config)
    with pytest.raises(SandboxError, match="not started"):
        await b.exec("true")
    await b.start()
    docker_client.api.remove_container(b.container_id, force=True)  # the engine lost it
    with pytest.raises(SandboxError, match="gone or stopped"):
        await b.exec("true")
    await b.aclose()
    await b.aclose()  # idempotent
    with pytest.raises(SandboxError, match="after aclose"):
        await b.exec("true")


@pytest.mark.docker
async def test_missing_image_is_a_clear_error(docker_config):
    from agentgym.sandboxes.docker import DockerSandbox

    config = dataclasses.replace(docker_config, image="agentgym-no-such-image:0")
    with pytest.raises(SandboxError, match="build-image"):
        async with DockerSandbox(config):
            pass


@pytest.mark.docker
def test_build_image_cli_reuses_the_cached_image(docker_engine, sandbox_image):
    from typer.testing import CliRunner

    from agentgym.cli import app

    result = CliRunner().invoke(app, ["sandbox", "build-image"])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output


@pytest.mark.docker
async def test_a_long_command_does_not_block_the_event_loop(box):
    import asyncio

    slow = asyncio.create_task(box.exec("sleep 5; echo slow", timeout=30))
    start = time.monotonic()
    quick = [await box.exec(f"echo {i}") for i in range(3)]
    assert [r.stdout for r in quick] == ["0\n", "1\n", "2\n"]
    assert not slow.done() and time.monotonic() - start < 5
    assert (await slow).stdout == "slow\n"
