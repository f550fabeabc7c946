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


def _interrupt_when(proc: subprocess.Popen[str], ready: str, timeout: float = 240
                    ) -> tuple[float, str]:
    """Send SIGINT once ``ready`` appears on stderr; (seconds to exit, all stderr)."""
    import selectors

    assert proc.stderr is not None
    seen, deadline = "", time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while ready not in seen:
            assert proc.poll() is None, seen[-2000:]
            assert time.monotonic() < deadline, f"no {ready!r} in {timeout} s: {seen[-2000:]}"
            if sel.select(0.2):
                seen += proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, rest = proc.communicate(timeout=30)
    return time.monotonic() - sent, seen + rest


def test_ctrl_c_during_a_long_update_ends_train_within_2_s(tmp_path: Path,
                                                         tiny_model_dir: Path) -> None:
    pytest.importorskip("torch")
    run = tmp_path / "run"
    cfg = tmp_path / "train.yaml"
    # Thousands of epochs over the step's samples: an update that runs for minutes.
    cfg.write_text(f"run_dir: {run}\nsteps: 2\nsave_every: 1\ntensorboard: false\n"
                   "env: {id: agentgym/MentalMath-v0, eval_seeds: 2}\n"
                   f"model: {{path: {tiny_model_dir}}}\n"
                   "rollout: {tasks_per_step: 2, group_size: 2, max_tokens: 4}\n"
                   "optim: {lr: 1.0e-3, epochs: 5000}\n")
    proc = subprocess.Popen([sys.executable, "-m", "agentgym.cli", "train", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        took, stderr = _interrupt_when(proc, "update micro-batch")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-2000:]
    assert took < 2.0, f"exited {took:.1f} s after Ctrl-C"
    assert f"interrupted: the checkpoints so far are in {run}" in stderr
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]  # the held-out score before training is kept
    assert not (run / "checkpoints" / "step-000001").exists()  # no half-done step saved


def test_ctrl_c_stops_serve_within_2_s() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("aiohttp")
    proc = subprocess.Popen([sys.executable, "-m", "agentgym.cli", "serve", "smollm2",
                             "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    try:
        assert proc.stdout is not None
        deadline, seen = time.monotonic() + 240, ""
        while "serving" not in seen:
            assert proc.poll() is None, seen + proc.communicate()[0]
            assert time.monotonic() < deadline, f"not serving in 240 s: {seen[-2000:]}"
            seen += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 2.0, f"exited {took:.1f} s after Ctrl-C"
    assert proc.returncode in (0, 130) and "stopped" in out, out[-2000:]
