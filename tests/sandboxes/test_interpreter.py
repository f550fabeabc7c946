"""The persistent Python interpreter: state, limits, isolation, output caps."""

import asyncio
import subprocess
import sys

import pytest
from process_fixtures import gone_within, killed_outright, running, swept_after_its_owner

from agentgym.errors import ConfigError
from agentgym.sandboxes.base import SandboxError
from agentgym.sandboxes.interpreter import InterpreterLimits, PythonInterpreter


async def test_state_persists_and_is_fresh_per_interpreter():
    async with PythonInterpreter() as py:
        assert (await py.run("x = 6 * 7")).render() == "[no output]"
        assert (await py.run("x")).stdout == "42\n"
        assert (await py.run("print('a'); import sys; print('b', file=sys.stderr)")).stderr == "b\n"
    async with PythonInterpreter() as other:
        r = await other.run("x")
        assert not r.ok and "NameError" in r.error


async def test_exceptions_memory_and_output_caps():
    limits = InterpreterLimits(memory_mb=512, max_output_chars=200)
    async with PythonInterpreter(limits) as py:
        r = await py.run("1/0")
        assert "ZeroDivisionError" in r.error and "<cell>" in r.error
        r = await py.run("b = bytearray(2 * 2**30)")
        assert "MemoryError" in r.error
        r = await py.run("print('x' * 10**6)")
        assert r.truncated and len(r.stdout) == 200
        r = await py.run("import os; os.system('yes | head -c 100000')")  # child process output
        assert r.truncated and len(r.stdout) <= 400
        assert (await py.run("1 + 1")).stdout == "2\n"  # still alive


async def test_timeout_kills_and_restarts():
    async with PythonInterpreter(InterpreterLimits(call_timeout=1.0)) as py:
        await py.run("keep = 1")
        child = int((await py.run("import subprocess\n"
                                  "p = subprocess.Popen(['sleep', '100'])\np.pid")).stdout)
        r = await py.run("while True: pass")
        assert r.timed_out and not r.ok
        await asyncio.sleep(0.2)
        assert not running(child)  # the cell's child died with it
        r = await py.run("keep")
        assert r.restarted and "NameError" in r.error
        assert "restarted" in r.render()


async def test_cpu_limit_ends_interpreter():
    async with PythonInterpreter(InterpreterLimits(cpu_seconds=1, call_timeout=20)) as py:
        r = await py.run("while True: pass")
        assert not r.ok and "InterpreterDied" in r.error and "CPU" in r.error


async def test_no_network():
    async with PythonInterpreter() as py:
        r = await py.run("import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)")
        assert not r.ok and "OSError" in r.error, r
        assert py.isolation in ("netns", "rlimits")


async def test_closed_interpreter_refuses_and_close_is_idempotent():
    py = PythonInterpreter()
    await py.aclose()
    await py.aclose()
    with pytest.raises(SandboxError, match="closed"):
        await py.run("1")


def test_bad_limits():
    with pytest.raises(ConfigError, match="memory_mb must be > 0"):
        InterpreterLimits(memory_mb=0)


OWNER = r"""
import asyncio
import os
from agentgym.sandboxes.interpreter import PythonInterpreter

async def main():
    py = PythonInterpreter()
    cell = "import subprocess\nsubprocess.Popen(['sleep', '300']).pid"
    child = (await py.run(cell)).stdout.strip()
    running = asyncio.ensure_future(py.run("import time\ntime.sleep(300)"))
    await asyncio.sleep(0.3)
    print(child, os.getpid(), flush=True)
    await running

asyncio.run(main())
"""


async def test_a_cells_child_that_leaves_the_group_dies_with_the_interpreter():
    cell = ("import subprocess\n"
            "subprocess.Popen(['sleep', '300'], start_new_session=True).pid")
    async with PythonInterpreter() as py:
        child = int((await py.run(cell)).stdout.strip())
        assert running(child)
    assert gone_within(child, 30)


def test_a_cell_and_its_children_die_with_a_process_killed_outright():
    """SIGKILL runs no ``aclose``: the process's watchdog kills the interpreter's group; its
    working directory stays until the next interpreter's sweep."""
    with killed_outright(OWNER) as (child, owner):
        assert gone_within(child, 30)
    assert swept_after_its_owner("agentgym-py-", owner)


ABANDONED = r"""
import asyncio
from pathlib import Path
from agentgym.sandboxes.interpreter import PythonInterpreter
from agentgym.watchdog import descendants

def workers(pids):  # the interpreter's processes among them, still running
    found = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if stat not in "ZX" and b"proto_in" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except (OSError, IndexError):
            pass
    return found

async def main():
    loop = asyncio.get_running_loop()
    connect, connecting = loop.connect_write_pipe, asyncio.Event()

    async def slow_connect(*args, **kwargs):
        connecting.set()
        await asyncio.sleep(5)
        return await connect(*args, **kwargs)

    # the loop closes while the interpreter's pipes are being connected
    loop.connect_write_pipe = slow_connect
    asyncio.ensure_future(PythonInterpreter().run("1"))
    await connecting.wait()
    return descendants()

pids = asyncio.run(main())  # cancels the start on the way out
print("closed", len(workers(pids)), flush=True)
"""


def test_an_event_loop_closed_while_the_interpreter_starts_closes_and_takes_it_down():
    """An interpreter whose start is pending when its event loop closes is cancelled there:
    the loop closes (asyncio's subprocess transport would wait forever for the pipe it had
    not connected, Python 3.11) and the interpreter's process is dead by then."""
    done = subprocess.run([sys.executable, "-c", ABANDONED], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "closed 0\n"
