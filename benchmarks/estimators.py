"""Advantage estimators: milliseconds per call on a realistic batch.

16 groups × 8 trajectories × 50 steps (6,400 step records). Each trajectory is a random walk
on an 8×8 grid from the same start, so state keys repeat across trajectories and within one
(loops), giving GiGPO realistic anchor-state clusters; 10% of steps are invalid; a step
reaching the goal cell earns 1. Median of repeated calls. Results go to docs/benchmarks.md.

    python benchmarks/estimators.py [--repeats 30] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time

from results import write_section

import agentgym
from agentgym.trainers.advantages import get_estimator
from agentgym.types import Group, Message, Step, StepResult, Trajectory

GROUPS, TRAJS, STEPS, SIDE = 16, 8, 50, 8
SETTINGS = [
    ("grpo", {}),
    ("grpo", {"mode": "mean_norm"}),
    ("rloo", {}),
    ("gigpo", {}),
    ("gigpo", {"episode_stats": "step"}),
]


def make_groups(seed: int = 0) -> list[Group]:
    rng = random.Random(seed)
    action = Message("assistant", "move")
    groups = []
    for g in range(GROUPS):
        goal = (rng.randrange(SIDE), rng.randrange(SIDE))
        trajs = []
        for i in range(TRAJS):
            pos, steps = (0, 0), []
            for t in range(STEPS):
                key = f"{pos[0]},{pos[1]}"
                dx, dy = rng.choice([(0, 1), (1, 0), (0, -1), (-1, 0)])
                new = (min(max(pos[0] + dx, 0), SIDE - 1), min(max(pos[1] + dy, 0), SIDE - 1))
                valid = rng.random() > 0.1 and new != pos
                pos = new if valid else pos
                reward = 1.0 if pos == goal else 0.0
                steps.append(Step(t, action, StepResult((), reward), state_key=key, valid=valid))
            trajs.append(Trajectory(f"g{g}t{i}", f"task{g}", f"task{g}", (), tuple(steps)))
        groups.append(Group(f"task{g}", tuple(trajs)))
    return groups


def time_ms(fn, groups, repeats: int) -> float:
    fn(groups)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(groups)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    groups = make_groups()
    n_steps = sum(len(t.steps) for g in groups for t in g.trajectories)
    keys = [(i, s.state_key) for i, g in enumerate(groups) for t in g.trajectories
            for s in t.steps]
    clusters = len(set(keys))
    rows = ["| estimator | options | ms per call | step records / s |", "|---|---|---:|---:|"]
    for name, options in SETTINGS:
        ms = time_ms(get_estimator(name, **options), groups, args.repeats)
        shown = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
        rows.append(f"| {name} | {shown} | {ms:.2f} | {n_steps / ms * 1000:,.0f} |")
        print(rows[-1])
    body = "\n".join([
        f"{GROUPS} groups × {TRAJS} trajectories × {STEPS} steps ({n_steps:,} step records); "
        f"random walks on an {SIDE}×{SIDE} grid, so GiGPO sees {clusters:,} anchor-state "
        f"clusters ({n_steps / clusters:.1f} steps each on average); 10% invalid steps.",
        f"Median of {args.repeats} calls. Machine: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, agentgym {agentgym.__version__}.",
        "Command: `python benchmarks/estimators.py`",
        "",
        *rows,
    ])
    if not args.no_write:
        write_section("Advantage estimators", body)


if __name__ == "__main__":
    main()
