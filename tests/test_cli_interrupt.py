"""Ctrl-C ends a command at once and keeps what finished; in-process models get no step limit."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from process_fixtures import Started, stop_and_wait, wait_until

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


CLI = [sys.executable, "-m", "agentgym.cli"]


def _ctrl_c(started: Started, ready: Callable[[], bool], what: str) -> tuple[int, float, str]:
    """Press Ctrl-C once ``ready()`` holds and wait for the command to exit.

    Ctrl-C goes to the command's whole process group, as a terminal sends it. The command may
    take minutes to get ready on a loaded machine (:data:`READY_S`) and is given
    :data:`STOP_S` to exit; the tests assert what it did (exit code, message, what it kept,
    the work it did not finish), not how fast. Returns the exit code, the seconds from Ctrl-C
    to the exit (for the failure message) and everything it printed.
    """
    wait_until(ready, what, started)
    took = stop_and_wait(started, signal.SIGINT)
    print(f"exited {took:.1f} s after Ctrl-C")  # shown by pytest -rP: the figure docs quote
    return started.proc.returncode, took, started.output()


def _has_line(*paths: Path) -> Callable[[], bool]:
    """Whether one of ``paths`` holds a finished line (an episode written)."""
    return lambda: any(p.exists() and p.read_text().count("\n") >= 1 for p in paths)


def _printed(started: Started, marker: str) -> Callable[[], bool]:
    """Whether the command printed ``marker``."""
    return lambda: marker in started.output()


ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def test_ctrl_c_ends_a_rollout_and_keeps_finished_episodes(tmp_path: Path, tiny_model_dir: Path,
                                                           spawn) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "out.jsonl"
    episodes = 400  # minutes of work: an exit with 130 and fewer lines is Ctrl-C's doing
    started = spawn(CLI + [
        "rollout", "agentgym/MentalMath-v0", "--policy", f"hf:{tiny_model_dir}", "--episodes",
        str(episodes), "--concurrency", "2", "--max-tokens", "100", "--out", str(out)], env=ENV)
    # The writer may stream to a side file that it moves into place when it closes.
    code, took, output = _ctrl_c(started, _has_line(out, out.with_name(out.name + ".partial")),
                                 "finished episode in the output file")
    assert code == 130, f"exit {code} {took:.1f} s after Ctrl-C:\n{output[-2000:]}"
    lines = out.read_text().splitlines()
    assert 0 < len(lines) < episodes
    assert all(json.loads(x)["status"] in ("terminated", "truncated") for x in lines)
    assert f"interrupted: {len(lines)} finished episodes are in {out}" in output


def test_ctrl_c_ends_an_eval_and_the_same_command_resumes(tmp_path: Path, tiny_model_dir: Path,
                                                          spawn) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    suite = tmp_path / "mm.yaml"
    suite.write_text("name: mm\nversion: 1\nentries:\n  - env: agentgym/MentalMath-v0\n"
                     "    split: test\n    tasks: 400\n")
    out = tmp_path / "eval"
    results = out / "results.jsonl"
    started = spawn(CLI + ["eval", "--suite", str(suite), "--policy", f"hf:{tiny_model_dir}",
                           "--concurrency", "2", "--max-tokens", "100", "--out", str(out)],
                    env=ENV)
    code, took, output = _ctrl_c(started, _has_line(results), "finished episode in results")
    assert code == 130, f"exit {code} {took:.1f} s after Ctrl-C:\n{output[-2000:]}"
    assert "the same command resumes" in output
    kept = [json.loads(x) for x in results.read_text().splitlines()]
    assert 0 < len(kept) < 400 and json.loads((out / "timing.json").read_text())["wall_s"] > 0


def test_ctrl_c_during_a_long_update_ends_train(tmp_path: Path, tiny_model_dir: Path,
                                                spawn) -> None:
    pytest.importorskip("torch")
    run = tmp_path / "run"
    cfg = tmp_path / "train.yaml"
    # Thousands of epochs over the step's samples: an update that runs for minutes.
    cfg.write_text(f"run_dir: {run}\nsteps: 2\nsave_every: 1\ntensorboard: false\n"
                   "env: {id: agentgym/MentalMath-v0, eval_seeds: 2}\n"
                   f"model: {{path: {tiny_model_dir}}}\n"
                   "rollout: {tasks_per_step: 2, group_size: 2, max_tokens: 4}\n"
                   "optim: {lr: 1.0e-3, epochs: 5000}\n")
    started = spawn(CLI + ["train", str(cfg)], env=ENV)
    code, took, output = _ctrl_c(started, _printed(started, "update micro-batch"),
                                 "'update micro-batch' line")
    assert code == 130, f"exit {code} {took:.1f} s after Ctrl-C:\n{output[-2000:]}"
    assert f"interrupted: the checkpoints so far are in {run}" in output
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]  # the held-out score before training is kept
    assert not (run / "checkpoints" / "step-000001").exists()  # no half-done step saved


def test_ctrl_c_stops_serve(spawn) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("aiohttp")
    started = spawn(CLI + ["serve", "smollm2", "--port", "0"], env={**ENV, "COLUMNS": "200"})
    code, took, output = _ctrl_c(started, _printed(started, "serving"), "'serving' line")
    assert code in (0, 130) and "stopped" in output, \
        f"exit {code} {took:.1f} s after Ctrl-C:\n{output[-2000:]}"
