import os
import subprocess
import sys

import pytest

from agentgym.sandboxes.interpreter import PythonInterpreter
from agentgym.sandboxes.local import LocalSandbox
from agentgym.scratch import scratch_dir, sweep_scratch

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/pid"),
                                reason="owners are judged through /proc (Linux)")

MAKE = r"""
import sys, time
from agentgym.scratch import scratch_dir
print(scratch_dir("agentgym-sbx-", sys.argv[1]), flush=True)
if sys.argv[2] == "stay":
    time.sleep(300)
"""


def _made_by_another_process(folder, stay: bool):
    """A scratch directory made in ``folder`` by a child that exits (closing nothing) or stays."""
    proc = subprocess.Popen([sys.executable, "-c", MAKE, str(folder), "stay" if stay else "go"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    path = proc.stdout.readline().strip()
    if not stay:
        proc.wait()
    return proc, path


def test_a_dead_owners_directory_goes_and_a_living_owners_stays(tmp_path):
    living, alive = _made_by_another_process(tmp_path, stay=True)
    try:
        _, dead = _made_by_another_process(tmp_path, stay=False)  # its own sweep keeps `alive`
        assert os.path.isdir(alive)
        (tmp_path / os.path.basename(dead) / "repo").mkdir()  # contents go with it
        ns = os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]")
        others = [f"agentgym-sbx-{int(ns) + 1}-1-1-abc",  # another pid namespace's
                  "agentgym-sbx-old",  # not named after an owner
                  f"agentgym-py-{ns}-{2**22 + 7}-0-abc"]  # another prefix
        for name in others:
            (tmp_path / name).mkdir()
        (tmp_path / f"agentgym-sbx-{ns}-{2**22 + 7}-0-file").write_text("a file is kept")

        assert sweep_scratch("agentgym-sbx-", str(tmp_path)) == 1
        assert not os.path.exists(dead) and os.path.isdir(alive)
        assert all((tmp_path / name).is_dir() for name in others)
        assert sweep_scratch("agentgym-sbx-", str(tmp_path)) == 0
    finally:
        living.kill()
        living.wait()
    assert sweep_scratch("agentgym-sbx-", str(tmp_path)) == 1  # its owner is gone now
    assert not os.path.exists(alive)


def test_the_first_scratch_dir_of_a_prefix_sweeps_once(tmp_path):
    _, dead = _made_by_another_process(tmp_path, stay=False)
    mine = scratch_dir("agentgym-sbx-", str(tmp_path))
    assert not os.path.exists(dead)
    assert mine.is_dir() and f"-{os.getpid()}-" in mine.name
    _, later = _made_by_another_process(tmp_path, stay=False)
    scratch_dir("agentgym-sbx-", str(tmp_path))  # swept already in this process
    assert os.path.isdir(later)


async def test_sandboxes_and_interpreters_make_their_directories_this_way():
    async with LocalSandbox() as box:
        assert box.root.name.startswith("agentgym-sbx-") and f"-{os.getpid()}-" in box.root.name
    async with PythonInterpreter() as py:
        cwd = (await py.run("import os; print(os.getcwd())")).stdout.strip()
        assert os.path.basename(cwd).startswith("agentgym-py-")
        assert f"-{os.getpid()}-" in os.path.basename(cwd)
