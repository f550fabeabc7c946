"""A command generating through vLLM, stopped by SIGTERM (a scheduler's ``kill``), leaves no
engine process behind and keeps the episodes it finished."""

import os
import signal
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from process_fixtures import STOP_S, swept_after_its_owner, wait_until

pytestmark = pytest.mark.vllm


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def test_sigterm_shuts_the_engine_down(spawn, tmp_path):
    pytest.importorskip("vllm")
    out = tmp_path / "episodes.jsonl"
    # Far more episodes than finish before the signal: the rollout is mid-generation.
    run = spawn([sys.executable, "-m", "agentgym.cli", "rollout", "agentgym/MentalMath-v0",
                 "--policy", "vllm:smollm2", "--episodes", "2000", "--out", str(out)])
    partial = out.with_name(out.name + ".partial")  # where episodes stream until the end
    wait_until(lambda: _lines(partial) >= 1, "the first episode is written", run)
    engine = psutil.Process(run.proc.pid).children(recursive=True)
    assert engine, "vLLM runs its engine core in a child process"
    os.kill(run.proc.pid, signal.SIGTERM)  # the command only, as `kill PID` does
    assert run.proc.wait(timeout=STOP_S) == 130, run.output()[-3000:]
    _, alive = psutil.wait_procs(engine, timeout=STOP_S)
    assert not alive, [p.cmdline() for p in alive]
    assert "interrupted:" in run.output()
    assert 1 <= _lines(out) < 2000  # what finished before the signal is kept


def test_sigkill_takes_the_engine_down_too(spawn, tmp_path):
    """SIGKILL (or the OOM killer) runs no cleanup: the engine core, in a session of its own,
    would hold its memory on; the watchdog the backend arms kills it."""
    pytest.importorskip("vllm")
    out = tmp_path / "episodes.jsonl"
    run = spawn([sys.executable, "-m", "agentgym.cli", "rollout", "agentgym/MentalMath-v0",
                 "--policy", "vllm:smollm2", "--episodes", "2000", "--out", str(out)])
    partial = out.with_name(out.name + ".partial")
    wait_until(lambda: _lines(partial) >= 1, "the first episode is written", run)
    engine = psutil.Process(run.proc.pid).children(recursive=True)
    assert any("EngineCore" in " ".join(p.cmdline()) for p in engine), engine
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait(timeout=STOP_S)
    _, alive = psutil.wait_procs(engine, timeout=STOP_S)
    assert not alive, [p.cmdline() for p in alive]
    # its weight-sync folder (in /dev/shm: memory) stays, and the next backend's sweep takes it
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    assert swept_after_its_owner("agentgym-vllm-", run.proc.pid, folder)
