"""agentgym.watchdog: processes that die with the one that started them, however it ends."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_fixtures import gone_within, killed_outright, running

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


def test_a_guarded_process_dies_when_its_owner_is_killed_outright():
    with killed_outright(OWNER) as (child, *guarded):
        assert guarded == [child]
        assert gone_within(child, 30)


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
    with killed_outright(GROUPS) as (kept, released, orphan):
        assert gone_within(kept, 30) and gone_within(orphan, 30)
        assert running(released)


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


MARKED = r"""
import os
import subprocess
import time
from agentgym.watchdog import MARK_VARIABLE, new_mark, shared_watchdog

mark = new_mark()
env = {**os.environ, MARK_VARIABLE: mark}
# a child that leaves its parent's group and session: only the mark finds it
marked = subprocess.Popen(["sleep", "300"], start_new_session=True, env=env)
other = subprocess.Popen(["sleep", "300"], start_new_session=True)
assert shared_watchdog().guard_mark(mark)
print(marked.pid, other.pid, flush=True)
time.sleep(300)
"""


def test_marked_processes_die_with_a_process_killed_outright_and_others_live():
    with killed_outright(MARKED) as (marked, other):
        assert gone_within(marked, 30)
        assert running(other)


def test_kill_marked_finds_a_process_by_its_environment_alone():
    import os

    from agentgym.watchdog import MARK_VARIABLE, kill_marked, marked, new_mark

    mark = new_mark()
    env = {**os.environ, MARK_VARIABLE: mark}
    # a shell that starts a setsid'd grandchild and exits: no pid or group leads to it
    shell = subprocess.run(["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"],
                           env=env, capture_output=True, text=True, check=True)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not marked(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        found = marked(mark)
        assert len(found) == 1 and other.pid not in found, (shell.stdout, found)
        assert kill_marked(mark) == found
        (grandchild,) = found
        assert gone_within(grandchild, 30) and other.poll() is None
        assert marked(mark) == set() and kill_marked(mark) == set()
    finally:
        kill_marked(mark)
        other.kill()
        other.wait()


def test_kill_marked_does_not_wait_on_a_process_that_cleared_its_environment():
    """A process mid-exec shows no environment for a moment, so kill_marked looks again while
    one is there; one that cleared its environment (``env -i``) still has a command line,
    and is not waited on."""
    from agentgym.watchdog import kill_marked, new_mark

    cleared = subprocess.Popen(["env", "-i", "sleep", "300"])
    try:
        for _ in range(500):  # until env has exec'd sleep
            if Path(f"/proc/{cleared.pid}/cmdline").read_bytes().startswith(b"sleep"):
                break
            time.sleep(0.01)
        started = time.monotonic()
        assert kill_marked(new_mark(), settle=60) == set()
        assert time.monotonic() - started < 30  # it would wait the whole minute
        assert cleared.poll() is None
    finally:
        cleared.kill()
        cleared.wait()
