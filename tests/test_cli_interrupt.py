"""Ctrl-C ends a command at once and keeps what finished; in-process models get no step limit."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

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


WAIT_S = 240  # for the command to reach the point where Ctrl-C is pressed
Waiter = Callable[[subprocess.Popen[str], IO[str]], str]


def _ctrl_c(args: list[str], wait: Waiter, *, merge_output: bool = False,
            env: Mapping[str, str] | None = None) -> tuple[int, float, str]:
    """Run ``agentgym ARGS``, press Ctrl-C once ``wait`` returns, and wait 30 s for the exit.

    Returns the exit code, the seconds from Ctrl-C to the exit, and everything the command
    printed on stderr (on stdout and stderr together with ``merge_output``).
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli", *args], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    stream = proc.stdout if merge_output else proc.stderr
    assert stream is not None
    try:
        seen = wait(proc, stream)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, took, seen + (out if merge_output else err)


def _first_line_in(*paths: Path) -> Waiter:
    """Wait until one of ``paths`` holds a finished line (an episode written)."""
    def wait(proc: subprocess.Popen[str], stream: IO[str]) -> str:
        deadline = time.monotonic() + WAIT_S
        while not any(p.exists() and p.read_text().count("\n") >= 1 for p in paths):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"no episode finished in {WAIT_S} s"
            time.sleep(0.2)
        return ""

    return wait


def _printed(marker: str) -> Waiter:
    """Wait until the command prints ``marker``; returns what it printed so far."""
    def wait(proc: subprocess.Popen[str], stream: IO[str]) -> str:
        seen, deadline = "", time.monotonic() + WAIT_S
        with selectors.DefaultSelector() as sel:
            sel.register(stream, selectors.EVENT_READ)
            while marker not in seen:
                assert proc.poll() is None, f"exited before {marker!r}: {seen[-2000:]}"
                assert time.monotonic() < deadline, \
                    f"no {marker!r} in {WAIT_S} s: {seen[-2000:]}"
                if sel.select(0.2):
                    seen += stream.readline()
        return seen

    return wait


def test_ctrl_c_ends_a_rollout_within_2_s_and_keeps_finished_episodes(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "out.jsonl"
    # The writer may stream to a side file that it moves into place when it closes.
    code, took, stderr = _ctrl_c(
        ["rollout", "agentgym/MentalMath-v0", "--policy", f"hf:{tiny_model_dir}",
         "--episodes", "400", "--concurrency", "2", "--max-tokens", "100", "--out", str(out)],
        _first_line_in(out, out.with_name(out.name + ".partial")))
    assert code == 130, stderr[-2000:]
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
    results = out / "results.jsonl"
    code, took, stderr = _ctrl_c(
        ["eval", "--suite", str(suite), "--policy", f"hf:{tiny_model_dir}", "--concurrency",
         "2", "--max-tokens", "100", "--out", str(out)], _first_line_in(results))
    assert code == 130, stderr[-2000:]
    assert took < 2.0, f"exited {took:.1f} s after Ctrl-C"
    assert "the same command resumes" in stderr
    kept = [json.loads(x) for x in results.read_text().splitlines()]
    assert kept and json.loads((out / "timing.json").read_text())["wall_s"] > 0


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
    code, took, stderr = _ctrl_c(["train", str(cfg)], _printed("update micro-batch"))
    assert code == 130, stderr[-2000:]
    assert took < 2.0, f"exited {took:.1f} s after Ctrl-C"
    assert f"interrupted: the checkpoints so far are in {run}" in stderr
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]  # the held-out score before training is kept
    assert not (run / "checkpoints" / "step-000001").exists()  # no half-done step saved


def test_ctrl_c_stops_serve_within_2_s() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("aiohttp")
    code, took, out = _ctrl_c(["serve", "smollm2", "--port", "0"], _printed("serving"),
                              merge_output=True, env={"COLUMNS": "200"})
    assert took < 2.0, f"exited {took:.1f} s after Ctrl-C"
    assert code in (0, 130) and "stopped" in out, out[-2000:]
