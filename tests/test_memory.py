"""Training processes keep freed tensor memory from staying with them: tcmalloc where the
system has it (the commands start themselves again with it preloaded), else glibc's mmap
threshold fixed."""

import json
import os
import platform
import subprocess
import sys

import pytest

from agentgym import memory
from agentgym.memory import fix_mmap_threshold, rerun_with_tcmalloc, with_tcmalloc

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_the_threshold_is_set_on_glibc(monkeypatch):
    monkeypatch.setattr(memory, "tcmalloc_loaded", lambda: False)
    assert fix_mmap_threshold() is True


def test_it_is_a_no_op_elsewhere(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert fix_mmap_threshold() is False


def test_it_is_a_no_op_under_tcmalloc(monkeypatch):
    monkeypatch.setattr(memory, "tcmalloc_loaded", lambda: True)
    assert fix_mmap_threshold() is False


@pytest.fixture()
def found(monkeypatch):
    monkeypatch.setattr(memory, "find_tcmalloc", lambda: "/lib/libtcmalloc_minimal.so.4")
    monkeypatch.setattr(sys, "platform", "linux")


def test_tcmalloc_goes_first_in_ld_preload(found):
    assert with_tcmalloc({})["LD_PRELOAD"] == "/lib/libtcmalloc_minimal.so.4"
    env = with_tcmalloc({"LD_PRELOAD": "/lib/libgomp.so", "HOME": "/h"})
    assert env == {"LD_PRELOAD": "/lib/libtcmalloc_minimal.so.4:/lib/libgomp.so", "HOME": "/h"}


def test_no_preload_when_switched_off_or_already_there(found):
    assert "LD_PRELOAD" not in with_tcmalloc({"AGENTGYM_TCMALLOC": "0"})
    mine = {"LD_PRELOAD": "/opt/libtcmalloc.so.4"}
    assert with_tcmalloc(mine) == mine


def test_no_preload_without_the_library(monkeypatch):
    monkeypatch.setattr(memory, "find_tcmalloc", lambda: None)
    assert with_tcmalloc({"A": "1"}) == {"A": "1"}


def test_only_commands_that_train_or_generate_start_again(found, monkeypatch):
    monkeypatch.setattr(memory, "tcmalloc_loaded", lambda: False)
    calls = []

    def execve(path, args, env):
        calls.append((path, args, env))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", execve)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    for argv in ([], ["envs"], ["compare", "a", "b"], ["--help"], ["train", "--help"]):
        monkeypatch.setattr(sys, "orig_argv", ["python", "/bin/agentgym", *argv])
        rerun_with_tcmalloc(argv)
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "pytest", "tests"])
    rerun_with_tcmalloc(["train", "job.yaml"])  # main() called in-process: not this command
    assert calls == []
    monkeypatch.setattr(sys, "orig_argv", ["python", "/bin/agentgym", "train", "job.yaml"])
    with pytest.raises(SystemExit):
        rerun_with_tcmalloc(["train", "job.yaml"])
    (path, args, env), = calls
    assert path == sys.executable and args == [sys.executable, "/bin/agentgym", "train",
                                               "job.yaml"]
    assert env["LD_PRELOAD"] == "/lib/libtcmalloc_minimal.so.4"
    assert env["AGENTGYM_TCMALLOC_PRELOADED"] == "/lib/libtcmalloc_minimal.so.4"


def test_an_already_loaded_or_switched_off_tcmalloc_starts_nothing(found, monkeypatch):
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("started again"))
    monkeypatch.setattr(sys, "orig_argv", ["python", "/bin/agentgym", "train", "job.yaml"])
    monkeypatch.delenv("AGENTGYM_TCMALLOC", raising=False)
    monkeypatch.setattr(memory, "tcmalloc_loaded", lambda: True)
    rerun_with_tcmalloc(["train", "job.yaml"])
    monkeypatch.setattr(memory, "tcmalloc_loaded", lambda: False)
    monkeypatch.setenv("AGENTGYM_TCMALLOC", "0")
    rerun_with_tcmalloc(["train", "job.yaml"])


def test_the_started_process_takes_tcmalloc_out_of_what_children_inherit(monkeypatch):
    monkeypatch.setenv("AGENTGYM_TCMALLOC_PRELOADED", "/lib/libtcmalloc_minimal.so.4")
    monkeypatch.setenv("LD_PRELOAD", "/lib/libtcmalloc_minimal.so.4:/lib/libgomp.so")
    rerun_with_tcmalloc(["train", "job.yaml"])
    assert os.environ["LD_PRELOAD"] == "/lib/libgomp.so"
    assert "AGENTGYM_TCMALLOC_PRELOADED" not in os.environ
    monkeypatch.setenv("AGENTGYM_TCMALLOC_PRELOADED", "/lib/libtcmalloc_minimal.so.4")
    monkeypatch.setenv("LD_PRELOAD", "/lib/libtcmalloc_minimal.so.4")
    rerun_with_tcmalloc(["train", "job.yaml"])
    assert "LD_PRELOAD" not in os.environ


PROBE = """
import json, os, subprocess, sys
from agentgym.memory import rerun_with_tcmalloc, tcmalloc_loaded
rerun_with_tcmalloc(sys.argv[1:])
child = subprocess.run(["cat", "/proc/self/maps"], capture_output=True, text=True).stdout
print(json.dumps({"pid": os.getpid(), "loaded": tcmalloc_loaded(),
                  "preload": os.environ.get("LD_PRELOAD"), "child": "libtcmalloc" in child}))
"""


@pytest.mark.skipif(memory.find_tcmalloc() is None
                    and os.environ.get("AGENTGYM_REQUIRE_EXTRAS") != "1",
                    reason="no tcmalloc here (Debian: apt-get install libtcmalloc-minimal4)")
def test_a_real_restart_runs_under_tcmalloc_and_its_children_do_not():
    assert memory.find_tcmalloc() is not None, "CI installs libtcmalloc-minimal4 (.ci/test.sh)"
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "AGENTGYM_TCMALLOC", "AGENTGYM_TCMALLOC_PRELOADED")}
    proc = subprocess.Popen([sys.executable, "-c", PROBE, "rollout"], stdout=subprocess.PIPE,
                            text=True, env=env)
    out, _ = proc.communicate(timeout=120)
    seen = json.loads(out)
    assert seen["pid"] == proc.pid  # replaced in place, not a child
    assert seen["loaded"] is True and seen["child"] is False and seen["preload"] is None
    off = subprocess.run([sys.executable, "-c", PROBE, "rollout"], capture_output=True, text=True,
                         env={**env, "AGENTGYM_TCMALLOC": "0"}, timeout=120)
    assert json.loads(off.stdout)["loaded"] is False


RELEASE = """
import json, numpy as np
from agentgym import memory
from agentgym.memory import release_free_memory
blocks = [np.ones(1 << 12) for _ in range(32000)]  # 1 GB in 32 KiB blocks (glibc: its heap)
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
del blocks
held = rss()
print(json.dumps({"tcmalloc": memory.tcmalloc_loaded(), "released": release_free_memory(),
                  "before": held, "after": rss()}))
"""


@pytest.mark.parametrize("allocator", ["tcmalloc", "glibc"])
def test_freed_memory_goes_back_to_the_system(allocator):
    path = memory.find_tcmalloc()
    if allocator == "tcmalloc" and path is None:
        if os.environ.get("AGENTGYM_REQUIRE_EXTRAS") == "1":
            pytest.fail("CI installs libtcmalloc-minimal4 (.ci/test.sh)")
        pytest.skip("no tcmalloc here (Debian: apt-get install libtcmalloc-minimal4)")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if allocator == "tcmalloc":
        env["LD_PRELOAD"] = str(path)
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True,
                         env=env, timeout=120)
    seen = json.loads(out.stdout)
    assert seen["tcmalloc"] is (allocator == "tcmalloc") and seen["released"] is True
    assert seen["before"] > 0.9e9 and seen["after"] < seen["before"] - 0.8e9, seen
