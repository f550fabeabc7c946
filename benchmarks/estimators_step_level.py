"""Step-level estimators (HGPO, SALT): milliseconds per call, vectorized vs a plain loop.

16 groups × 8 trajectories × 50 steps (6,400 step records). Each trajectory is a random walk
on a 5×5 grid from the same start, so states and short histories repeat across and within
trajectories. Each step's action is model-like text: a sentence that varies from step to step
plus a Hermes ``<tool_call>`` naming the move (SALT parses each distinct call once);
3% of steps are malformed JSON, and a move into a wall is invalid. Reaching the goal cell
earns 1. The reference (``agentgym.trainers.advantages.reference``, per-step Python
loops) must give the same numbers; that is asserted before timing. Median of repeated calls.

    python benchmarks/estimators_step_level.py [--repeats 20] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from results import write_section

import agentgym
from agentgym.parsing import parse_tool_calls
from agentgym.trainers.advantages import get_estimator
from agentgym.trainers.advantages.diagnostics import state_keys, step_group_recurrence
from agentgym.trainers.advantages.reference import hgpo_reference, salt_reference
from agentgym.trainers.advantages.salt import canonical_action
from agentgym.types import Group, Message, Step, StepResult, Trajectory

GROUPS, TRAJS, STEPS, SIDE, K = 16, 8, 50, 5, 4
MOVES = {"up": (0, 1), "down": (0, -1), "left": (-1, 0), "right": (1, 0)}
SETTINGS: list[tuple[str, dict, Callable, bool]] = [  # (name, options, reference, as text)
    ("hgpo", {"history_length": K}, lambda g: hgpo_reference(g, K), True),
    ("salt", {"history": 0}, lambda g: salt_reference(g, history=0), True),
    ("salt", {"history": "all"}, lambda g: salt_reference(g, history="all"), True),
    ("salt", {"history": 0}, lambda g: salt_reference(g, history=0), False),
    ("salt", {"history": "all"}, lambda g: salt_reference(g, history="all"), False),
]


def action_text(rng: random.Random, t: int, move: str) -> str:
    call = json.dumps({"name": "move", "arguments": {"direction": move}})
    if rng.random() < 0.03:
        call = call[:-3]  # cut off: malformed JSON, no call parsed
    thought = rng.choice(["The box is", "I think the goal is", "Let me try", "Moving"])
    return f"{thought} {rng.randrange(100)} cells away (turn {t}).\n<tool_call>{call}</tool_call>"


def structured(groups: list[Group]) -> list[Group]:
    """The same groups with each parsed call moved into ``Message.tool_calls`` (no text)."""
    def convert(step: Step) -> Step:
        calls = parse_tool_calls(step.action.content).calls
        return replace(step, action=Message("assistant", "" if calls else step.action.content,
                                            tool_calls=calls))
    return [replace(g, trajectories=tuple(replace(t, steps=tuple(map(convert, t.steps)))
                                          for t in g.trajectories)) for g in groups]


def make_groups(seed: int = 0) -> list[Group]:
    rng = random.Random(seed)
    groups = []
    for g in range(GROUPS):
        goal = (rng.randrange(SIDE), rng.randrange(SIDE))
        trajs = []
        for i in range(TRAJS):
            pos, steps = (0, 0), []
            for t in range(STEPS):
                move = rng.choice(list(MOVES))
                text = action_text(rng, t, move)
                new = (pos[0] + MOVES[move][0], pos[1] + MOVES[move][1])
                valid = 0 <= min(new) and max(new) < SIDE and "}}</tool_call>" in text
                key = f"{pos[0]},{pos[1]}"
                pos = new if valid else pos
                steps.append(Step(t, Message("assistant", text),
                                  StepResult((), 1.0 if pos == goal else 0.0), state_key=key,
                                  valid=valid))
            trajs.append(Trajectory(f"g{g}t{i}", f"task{g}", f"task{g}", (), tuple(steps),
                                    metrics={"history_length": float(K)}))
        groups.append(Group(f"task{g}", tuple(trajs)))
    return groups


def time_ms(fn: Callable, groups: list[Group], repeats: int) -> float:
    fn(groups)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(groups)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def canonicalize(groups: list[Group]) -> list:
    """SALT's canonical actions of every step, with one parse cache per call (as SALT)."""
    cache: dict = {}
    return [canonical_action(s, cache) for g in groups for t in g.trajectories for s in t.steps]


def level_sizes(groups: list[Group]) -> str:
    """Share of steps whose level-k group (HGPO) has another member, k = 1 … K+1."""
    r = step_group_recurrence(state_keys(groups), levels=K + 1)
    return ", ".join(f"k={k}: {share:.0%}" for k, share in enumerate(r.grouped, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--reference-repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    groups = make_groups()
    calls = structured(groups)
    n_steps = sum(len(t.steps) for g in groups for t in g.trajectories)
    load = os.getloadavg()[0]
    rows = ["| estimator | options | actions | ms per call | of which canonical actions | "
            "reference ms | speed-up |", "|---|---|---|---:|---:|---:|---:|"]
    for name, options, reference, as_text in SETTINGS:
        data = groups if as_text else calls
        estimate = get_estimator(name, **options)
        fast, slow = estimate(data), reference(data)
        worst = max(float(np.max(np.abs(fast[i] - np.asarray(slow[i])))) for i in fast)
        assert set(fast) == set(slow) and worst < 1e-9, f"{name} {options}: differs by {worst}"
        ms = time_ms(estimate, data, args.repeats)
        ref_ms = time_ms(reference, data, args.reference_repeats)
        shown = ", ".join(f"{k}={v}" for k, v in options.items())
        kind = "not read" if name == "hgpo" else "text, parsed" if as_text else "structured"
        canon = "—" if name == "hgpo" else f"{time_ms(canonicalize, data, args.repeats):.1f}"
        rows.append(f"| {name} | {shown} | {kind} | {ms:.1f} | {canon} | {ref_ms:.1f} | "
                    f"{ref_ms / ms:.1f}× |")
        print(rows[-1], f"(max difference {worst:.1e})")
    body = "\n".join([
        f"{GROUPS} groups × {TRAJS} trajectories × {STEPS} steps ({n_steps:,} step records); "
        f"random walks on a {SIDE}×{SIDE} grid. Share of steps whose HGPO level-k group has "
        f"another member: {level_sizes(groups)}. Actions are varied text around a Hermes tool "
        "call (3% malformed): SALT finds the marked blocks of every step and parses each "
        "distinct call once; the *structured* rows hold the "
        "same calls in `Message.tool_calls` (as an OpenAI-compatible server returns them), "
        "so only their JSON keys are computed. The reference is the per-step "
        "Python loop of `agentgym.trainers.advantages.reference`; both give the same numbers "
        "(asserted, to 1e-9).",
        f"Median of {args.repeats} calls ({args.reference_repeats} for the reference). "
        f"Machine: {os.cpu_count()} cores (1-minute load average {load:.1f} at the start"
        + (": other work shares them, so these are times under load), " if load >= 1.0
           else ", an idle machine), ")
        + f"Python {platform.python_version()}, "
        f"agentgym {agentgym.__version__}. *Of which canonical actions*: the time "
        "`salt.canonical_action` alone takes over the batch (parsing, JSON keys), the rest "
        "is flattening and the graph.",
        "Command: `python benchmarks/estimators_step_level.py`",
        "",
        *rows,
    ])
    if not args.no_write:
        write_section("Step-level estimators (HGPO, SALT)", body)


if __name__ == "__main__":
    main()
