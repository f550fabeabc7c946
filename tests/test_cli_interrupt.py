"""Ctrl-C ends a command at once and keeps what finished; in-process models get no step limit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgym.policies.limits import REMOTE_STEP_TIMEOUT, default_timeouts


def test_in_process_models_have_no_default_step_limit() -> None:
    class Local:
        async def generate(self, requests: object) -> list[object]:
            return []

    class Remote(Local):
        async def check(self) -> None:
            return None

    class Agent:
        def __init__(self, policy: object) -> None:
            self.policy = policy

    assert default_timeouts(Agent(Local())) == (None, None)
    assert default_timeouts(Agent(Remote()))[0] == REMOTE_STEP_TIMEOUT
    assert default_timeouts(object()) == (None, None)  # model-free
    assert default_timeouts(Agent(Local()), 5.0) == (5.0, None)  # the caller's choice wins


def test_ctrl_c_ends_a_rollout_within_2_s_and_keeps_finished_episodes(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli", "rollout", "agentgym/MentalMath-v0",
         "--policy", f"hf:{tiny_model_dir}", "--episodes", "400", "--concurrency", "2",
         "--max-tokens", "100", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 240
        # The writer may stream to a side file that it moves into place when it closes.
        streams = (out, out.with_name(out.name + ".partial"))
        while not any(p.exists() and p.read_text().count("\n") >= 1 for p in streams):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no episode finished in 240 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-2000:]
    assert took < 2.0, f"exited {took:.1f} s after Ctrl-C"
    lines = out.read_text().splitlines()
    assert lines and all(json.loads(x)["status"] in ("terminated", "truncated") for x in lines)
    assert f"interrupted: {len(lines)} finished episodes are in {out}" in stderr


def test_ctrl_c_ends_an_eval_within_2_s_and_the_same_command_resumes(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    suite = tmp_path / "mm.yaml"
    suite.write_text("name: mm\nversion: 1\nentries:\n  - env: agentgym/MentalMath-v0\n"
                     "    split: test\n    tasks: 400\n")
    out = tmp_path / "eval"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli", "eval", "--suite", str(suite), "--policy",
         f"hf:{tiny_model_dir}", "--concurrency", "2", "--max-tokens", "100", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = out / "results.jsonl"
    try:
        deadline = time.monotonic() + 240
        while not (results.exists() and results.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no episode finished in 240 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-2000:]
    assert took < 2.0, f"exited {took:.1f} s after Ctrl-C"
    assert "the same command resumes" in stderr
    kept = [json.loads(x) for x in results.read_text().splitlines()]
    assert kept and json.loads((out / "timing.json").read_text())["wall_s"] > 0
