"""Phases: a live bar on a terminal, plain timestamped lines in a log."""

from __future__ import annotations

import io

from rich.console import Console

from agentgym.phases import Phases


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_when_not_a_terminal() -> None:
    out, clock = io.StringIO(), Clock()
    with Phases(Console(file=out), every_s=10, clock=clock) as phases:  # a file: not a terminal
        assert not phases.live
        task = phases.add_task("eval [held-out]", total=32)
        for _ in range(31):
            clock.now += 1
            phases.advance(task)
        clock.now += 1
        phases.advance(task)
        update = phases.add_task("update", total=4)
        phases.update(update, completed=1, description="update micro-batch 1/4")
        phases.note("held-out success before training: 37.5% [eval]")
    lines = out.getvalue().splitlines()
    assert lines == ["[0 s] eval [held-out] 0/32", "[10 s] eval [held-out] 10/32",
                     "[20 s] eval [held-out] 20/32", "[30 s] eval [held-out] 30/32",
                     "[32 s] eval [held-out] 32/32 done", "[32 s] update 0/4",
                     "[32 s] update micro-batch 1/4 1/4",
                     "held-out success before training: 37.5% [eval]"]


def test_a_live_bar_on_a_terminal_names_the_phase() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with Phases(console) as phases:
        assert phases.live
        task = phases.add_task("rollouts Sokoban", total=8)
        phases.advance(task, 3)
        phases.update(task, description="rollouts Sokoban (step 2)")
    text = out.getvalue()
    assert "rollouts Sokoban (step 2)" in text and "3/8" in text


def test_jsonl_tail_reports_each_complete_line(tmp_path) -> None:
    from agentgym.phases import JsonlTail
    from agentgym.trainers.train_cli import held_out_line

    path = tmp_path / "metrics.jsonl"
    seen: list[str | None] = []
    with JsonlTail(path, lambda row: seen.append(held_out_line(row)), every_s=0.01):
        path.write_text('{"step": 0, "eval/success_rate": 0.375}\n{"step": 1, "loss": 0.1}\n'
                        '{"step": 2, "eval/success_rate": 0.5, "eval/mm/success_rate": 0.25')
    assert seen == ["before training: held-out success 37.5%", None]  # the last line is cut
    with path.open("a") as f:
        f.write("}\n")
    seen.clear()
    with JsonlTail(path, lambda row: seen.append(held_out_line(row)), every_s=0.01):
        pass
    assert seen[-1] == "after step 2: held-out success 50.0%, mm success 25.0%"


def test_a_phase_that_does_not_advance_still_prints_a_heartbeat() -> None:
    import time

    out = io.StringIO()
    with Phases(Console(file=out), every_s=0.05) as phases:
        phases.add_task("eval held-out", total=32)  # the first episode takes long
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.endswith("eval held-out 0/32") for line in lines)
