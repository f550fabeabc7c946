"""The local process sandbox: the Sandbox contract, timeouts, caps, limits and cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from process_fixtures import gone_within, killed_outright, running

from agentgym.sandboxes.base import Sandbox, SandboxError
from agentgym.sandboxes.local import LocalLimits, LocalSandbox


async def test_exec_output_exit_code_workdir_and_env():
    async with LocalSandbox() as box:
        assert isinstance(box, Sandbox)
        result = await box.exec("echo out; echo err >&2; echo $FOO; pwd; exit 3",
                                env={"FOO": "bar"})
        assert (result.exit_code, result.stderr, result.ok) == (3, "err\n", False)
        lines = result.stdout.splitlines()
        assert lines[:2] == ["out", "bar"] and lines[2] == str(box.root / "testbed")
        await box.exec("mkdir -p sub && echo x > sub/f")
        assert (await box.exec("cat f", workdir="/testbed/sub")).stdout == "x\n"
        missing = await box.exec("true", workdir="/nowhere")
        assert missing.exit_code == 1 and "No such file" in missing.stderr


async def test_timeout_kills_the_whole_process_group(tmp_path):
    async with LocalSandbox() as box:
        start = time.monotonic()
        result = await box.exec("sleep 300 & echo $! > child.pid; sleep 300", timeout=1)
        assert result.timed_out and result.exit_code == -1 and not result.ok
        assert time.monotonic() - start < 10
        child = int((await box.read_file("child.pid")).decode())
        await asyncio.sleep(0.2)
        assert not running(child)


async def test_background_child_does_not_hold_the_call_open():
    async with LocalSandbox() as box:
        start = time.monotonic()
        result = await box.exec("(sleep 300 &) ; echo done", timeout=30)
        assert result.stdout == "done\n" and time.monotonic() - start < 10


async def test_output_is_capped():
    async with LocalSandbox(max_output_bytes=1000) as box:
        result = await box.exec("head -c 5000000 /dev/zero | tr '\\0' a; echo tail >&2")
        assert len(result.stdout) == 1000 and result.truncated and result.stderr == "tail\n"


async def test_resource_limits_stop_memory_hogs_and_huge_files():
    limits = LocalLimits(memory_bytes=512 * 2**20, file_bytes=2**20)
    async with LocalSandbox(limits=limits) as box:
        hog = await box.exec("python -c 'x = bytearray(2 * 2**30)'")
        assert hog.exit_code != 0 and "MemoryError" in hog.stderr
        big = await box.exec("head -c 10000000 /dev/zero > big.bin")
        assert big.exit_code != 0
        assert (box.root / "testbed" / "big.bin").stat().st_size <= 2**20


async def test_files_copy_and_paths_stay_under_the_root(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    async with LocalSandbox() as box:
        await box.copy_in(str(src), "/testbed/project")
        assert await box.read_file("project/pkg/a.py") == b"A = 1\n"
        await box.write_file("/testbed/project/new.txt", "ü")
        await box.copy_out("/testbed/project", str(tmp_path / "out"))
        assert (tmp_path / "out" / "new.txt").read_text() == "ü"
        assert (tmp_path / "out" / "pkg" / "a.py").exists()
        # ".." cannot climb out of the root
        assert box.host_path("../../../etc/passwd") == box.root / "etc" / "passwd"
        with pytest.raises(FileNotFoundError):
            await box.read_file("/etc/hostname-agentgym-none")


async def test_diff_shows_untracked_files_and_leaves_the_index_alone():
    async with LocalSandbox() as box:
        await box.write_file("a.txt", "one\n")
        assert (await box.exec("git init -q . && git add -A && git commit -qm base")).ok
        assert await box.diff() == ""
        await box.write_file("a.txt", "two\n")
        await box.write_file("new/b.txt", "b\n")
        diff = await box.diff()
        assert "-one\n+two" in diff and "new file mode" in diff and "+b" in diff
        status = await box.exec("git status --porcelain")
        assert status.stdout.splitlines() == [" M a.txt", "?? new/"]
        assert await box.diff() == diff  # deterministic


async def test_aclose_kills_running_commands_and_is_idempotent():
    box = LocalSandbox()
    task = asyncio.create_task(box.exec("sleep 300 & echo $! > bg.pid; wait", timeout=600))
    pid_file = box.root / "testbed" / "bg.pid"
    for _ in range(3000):  # a minute at most; the file exists, empty, before the pid is in it
        await asyncio.sleep(0.02)
        if pid_file.exists() and pid_file.read_text().strip():
            break
    child = int(pid_file.read_text())
    task.cancel()  # cancellation of the call takes its processes down, promptly
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    await asyncio.sleep(0.2)
    assert not running(child)
    root = box.root
    await box.aclose()
    await box.aclose()
    assert not root.exists()
    with pytest.raises(SandboxError):
        await box.exec("true")


OWNER = r"""
import asyncio
import sys
from agentgym.sandboxes.local import LocalSandbox

async def main():
    box = LocalSandbox(root=sys.argv[1])
    command = asyncio.ensure_future(box.exec("sleep 300 & echo $! > bg.pid; wait", timeout=600))
    pid_file = box.root / "testbed" / "bg.pid"
    while not (pid_file.exists() and pid_file.read_text().strip()):
        await asyncio.sleep(0.02)
    print(pid_file.read_text().strip(), flush=True)
    await command

asyncio.run(main())
"""


async def test_a_child_that_leaves_the_group_dies_with_its_command():
    """A process in a session of its own (setsid) is out of the group's reach; it carries
    the command's mark in its environment, and dies by it when the command ends."""
    spawn = ("import subprocess; "
             "print(subprocess.Popen(['sleep', '300'], start_new_session=True).pid)")
    children = []
    try:
        async with LocalSandbox() as box:
            result = await box.exec(f'python -c "{spawn}"')
            children.append(int(result.stdout))
            assert gone_within(children[-1], 30)
            started = asyncio.ensure_future(box.exec(f'python -c "{spawn}" > pid; sleep 300'))
            for _ in range(3000):  # a minute at most: polls a file the command writes
                if box.host_path("pid").exists() and box.host_path("pid").read_text():
                    break
                await asyncio.sleep(0.02)
            children.append(int(box.host_path("pid").read_text()))
            assert running(children[-1])
        # aclose ends the running command and its marked processes
        assert gone_within(children[-1], 30)
        assert (await started).exit_code != 0
    finally:
        for pid in children:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_running_command_dies_with_a_process_killed_outright(tmp_path):
    """SIGKILL runs no ``finally``: the process's watchdog kills the command's group."""
    with killed_outright(OWNER, str(tmp_path)) as (child,):
        assert gone_within(child, 30)


ABANDONED = r"""
import asyncio
import sys
from agentgym.sandboxes.local import LocalSandbox

async def main():
    loop = asyncio.get_running_loop()
    connect = loop.connect_read_pipe

    async def slow_connect(*args, **kwargs):
        await asyncio.sleep(5)
        return await connect(*args, **kwargs)

    # Through asyncio's subprocess transport, a command whose pipes were still connecting
    # when its loop closed left that close waiting forever (Python 3.11); the sandbox starts
    # commands without it, which this slow connection would show.
    loop.connect_read_pipe = slow_connect
    box = LocalSandbox(root=sys.argv[1])
    asyncio.ensure_future(box.exec("sleep 300 & echo $! > bg.pid; wait", timeout=600))
    pid_file = box.root / "testbed" / "bg.pid"
    while not (pid_file.exists() and pid_file.read_text().strip()):
        await asyncio.sleep(0.001)
    print(pid_file.read_text().strip(), flush=True)  # and return: nothing awaits the command

asyncio.run(main())  # cancels the command on the way out
print("closed", flush=True)
"""


def test_an_event_loop_closed_while_a_command_runs_closes_and_takes_it_down(tmp_path):
    """A command nobody awaits when its event loop closes (a test that failed, an abandoned
    task) is cancelled there: the loop closes and the command's processes die with it."""
    owner = subprocess.Popen([sys.executable, "-c", ABANDONED, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert owner.stdout is not None
        child = int(owner.stdout.readline())
        assert owner.wait(timeout=60) == 0
        assert owner.stdout.readline() == "closed\n"
        assert gone_within(child, 30)
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
        if child is not None and running(child):
            os.kill(child, signal.SIGKILL)


async def test_a_child_that_cleared_its_environment_and_holds_the_output_is_killed():
    """No group and no mark reach it; the pipe it holds does: it is killed after a grace of
    seconds, and the call returns then, not at the child's end, with all the output."""
    pid = None
    try:
        async with LocalSandbox() as box:
            started = time.monotonic()
            result = await box.exec(  # the shell ends once the child is in its own session
                "env -i setsid sh -c 'echo $$ > pid; exec sleep 300' & "
                "until [ -s pid ]; do sleep 0.01; done; cat pid; echo done")
            assert time.monotonic() - started < 60
            pid = int(result.stdout.split()[0])
            assert result.stdout.split()[1:] == ["done"] and not result.truncated
            assert gone_within(pid, 30)
    finally:
        if pid is not None and running(pid):
            os.kill(pid, signal.SIGKILL)


async def test_a_command_cancelled_as_soon_as_it_starts_leaves_nothing_running():
    """The command is started and guarded with no await between: the first cancel finds its
    processes in the group, or marked, and they die."""
    async with LocalSandbox() as box:
        pid_file = box.host_path("bg.pid")
        task = asyncio.create_task(box.exec("sleep 300 & echo $! > bg.pid; wait"))
        await asyncio.sleep(0)  # the command starts
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)  # the shell died before or after it wrote the child's pid
        if pid_file.exists() and pid_file.read_text().strip():
            assert gone_within(int(pid_file.read_text()), 30)


async def test_a_second_cancel_while_the_first_cleans_up_leaves_nothing_behind():
    """A caller's timeout may cancel again while the command is being taken down."""
    async with LocalSandbox() as box:
        pid_file = box.host_path("bg.pid")
        task = asyncio.create_task(box.exec("sleep 300 & echo $! > bg.pid; wait"))
        for _ in range(3000):
            await asyncio.sleep(0.02)
            if pid_file.exists() and pid_file.read_text().strip():
                break
        child = int(pid_file.read_text())
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not [t for t in others if not t.done()]
        assert gone_within(child, 30)


async def test_a_command_too_long_to_start_is_an_observation():
    """Past the kernel's limit on one argument (128 KiB), as in the Docker sandboxes: the
    command fails and says why; the call does not raise."""
    async with LocalSandbox() as box:
        result = await box.exec("echo " + "a" * 200_000 + " | wc -c")
        assert result.exit_code == 1 and "argument list too long" in result.stderr
        assert (await box.exec("echo " + "a" * 100_000 + " | wc -c")).stdout == "100001\n"

