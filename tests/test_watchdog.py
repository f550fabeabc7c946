"""agentgym.watchdog: processes that die with the one that started them, however it ends."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

OWNER = r"""
import subprocess
import time
from agentgym.watchdog import Watchdog, descendants

child = subprocess.Popen(["sleep", "300"], start_new_session=True)
watchdog = Watchdog(descendants())
print(child.pid, *watchdog.pids, flush=True)
time.sleep(300)
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def test_a_guarded_process_dies_when_its_owner_is_killed_outright():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    child = None
    try:
        child, *guarded = (int(word) for word in owner.stdout.readline().split())
        assert guarded == [child]
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert _gone_within(child, 30)
    finally:
        owner.kill()
        if child is not None and _running(child):
            os.kill(child, signal.SIGKILL)


GROUPS = r"""
import subprocess
import time
from agentgym.watchdog import Watchdog

watchdog = Watchdog()
kept, released = (subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in "ab")
leader = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; sleep 0.3"], text=True,
                          stdout=subprocess.PIPE, start_new_session=True)
assert watchdog.guard(kept.pid) and watchdog.guard(released.pid)
assert watchdog.guard(leader.pid, group=True)
orphan = int(leader.stdout.readline())
leader.wait()  # the group's leader is gone; its background child is not
watchdog.release(released.pid)
print(kept.pid, released.pid, orphan, flush=True)
time.sleep(300)
"""


def test_a_guarded_group_dies_without_its_leader_and_a_released_process_lives():
    owner = subprocess.Popen([sys.executable, "-c", GROUPS], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    pids: list[int] = []
    try:
        pids = [int(word) for word in owner.stdout.readline().split()]
        kept, released, orphan = pids
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert _gone_within(kept, 30) and _gone_within(orphan, 30)
        assert _running(released)
    finally:
        owner.kill()
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_disarmed_it_kills_nothing_and_exited_processes_are_left_out():
    from agentgym.watchdog import Watchdog

    done = subprocess.Popen(["true"])
    done.wait()
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        watchdog = Watchdog({child.pid, done.pid})
        assert watchdog.pids == (child.pid,)
        watchdog.disarm()
        watchdog.disarm()
        time.sleep(0.3)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
