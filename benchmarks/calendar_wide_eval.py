"""Agent-job RL runs judged on more held-out calendars than their own 200: how much of a
seed's gain was its evaluation's draw of tasks, and how much the run.

    python benchmarks/calendar_wide_eval.py runs/wd_rl_s0 runs/wd_rl_s1 [...] [--episodes 400]

For every run folder: its last checkpoint is exported with merged weights (``agentgym
export RUN --out OUT/RUN_model --merge``), and that model and the run's warm start
(``model.path``) play ``--episodes`` greedy test-split calendars from ``--first-seed`` with
the job's settings (``agentgym rollout ... --temperature 0 --max-tokens 64 --kw
max_turns=4``), seeds the run's own evaluation did not use. Those outcomes join the run's
own (``heldout/step-0.json`` and its last step's), so each run is judged on 200 + episodes
tasks (``--episodes 0``: on its own 200 only). Every file is kept under ``--out`` and a run
whose files are there is not played again, so the script resumes.

It prints each run's gain on its own tasks, on the new ones and on all, with 95% paired
bootstrap intervals, the tasks it solved that the warm start did not (up) and the other
way (down), and success before and after; then over the runs: the mean gain with its
t-interval over seeds and the seeds' standard deviation, on their own 200 tasks and on
all; the seeds' variance on all tasks split into the part the draw of tasks explains and
the runs' own (a two-way layout of runs x tasks), with a permutation test of "the runs are
alike on every task"; and, given ``--against`` (another recipe's runs, seed for seed), the
paired differences. Given ``--from`` (the runs each run started from, seed for seed: a
second round of RL from the first round's exported end), a run is judged from the first
round's warm start, so its gain is both rounds'; a line before it gives the round's own gain
and whether its evaluation before its first step repeated the first round's last one. A
third round gives ``--from`` twice, the second rounds then the first ones, and so on back.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from agentgym.evaluation.stats import paired_bootstrap, seed_t_interval
from agentgym.jsonl import read_trajectories
from agentgym.trainers.heldout import task_outcomes

ENV = "agentgym/Calendar-v0"


def play(model: str, out: Path, first_seed: int, episodes: int) -> dict[str, float]:
    """Greedy held-out outcomes of ``model`` (task seed -> solved), played once and kept."""
    if not out.exists():
        part = out.with_suffix(".part.jsonl")
        subprocess.run(["agentgym", "rollout", ENV, "--policy", f"vllm:{model}",
                        "--episodes", str(episodes), "--seed", str(first_seed),
                        "--kw", "split=test", "--kw", "max_turns=4", "--temperature", "0",
                        "--max-tokens", "64", "--out", str(part)], check=True)
        part.rename(out)
    outcomes = task_outcomes(list(read_trajectories(out)))
    wanted = {str(s) for s in range(first_seed, first_seed + episodes)}
    if set(outcomes) != wanted:
        raise SystemExit(f"{out} scores {len(outcomes)} of the {episodes} tasks from seed "
                         f"{first_seed} (error episodes are left out); delete it to play again")
    return outcomes


def own_evaluation(run: Path) -> tuple[dict, dict, dict]:
    """The run's config and its held-out outcomes before and after RL."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    files = sorted((run / "heldout").glob("step-*.json"), key=lambda p: int(p.stem[5:]))
    if len(files) < 2:
        raise SystemExit(f"{run} has no held-out evaluation before and after RL "
                         f"(expected heldout/step-0.json and a later step's file)")
    before, after = (json.loads(p.read_text()) for p in (files[0], files[-1]))
    return config, before, after


def gain(before: dict, after: dict) -> tuple[float, float, float]:
    """Gain in points over the tasks of ``before`` and its 95% paired bootstrap interval."""
    seeds = sorted(before)
    g, low, high = paired_bootstrap([float(before[s]) for s in seeds],
                                    [float(after[s]) for s in seeds])
    return 100 * g, 100 * low, 100 * high


def spread(gains: np.ndarray, permutations: int, seed: int = 0) -> tuple[float, float, float]:
    """The seeds' variance of a gain, the tasks' part of it, and whether the runs differ.

    ``gains`` is (runs, tasks), each task's change (after - before) under each run, on the
    same tasks. Two-way layout without replication (runs x tasks): the variance of the runs'
    mean gains holds the runs' own spread plus ``MS_residual / tasks``, the part that comes
    from which tasks were drawn (each task's disagreement between runs beyond its mean and
    theirs). The p-value shuffles each task's outcomes across the runs (the runs alike).

    Returns:
        ``(between, tasks_part, p)``: variances in points squared, and the permutation p.
    """
    runs, n = gains.shape
    between = gains.mean(axis=1).var(ddof=1)
    resid = gains - gains.mean(axis=1, keepdims=True) - gains.mean(axis=0, keepdims=True) \
        + gains.mean()
    tasks_part = (resid ** 2).sum() / ((runs - 1) * (n - 1)) / n
    rng = np.random.default_rng(seed)
    reached = 0
    for chunk in range(0, permutations, 1000):  # 1000 shuffles at a time: bounded memory
        size = min(1000, permutations - chunk)
        shuffled = rng.permuted(np.broadcast_to(gains, (size, runs, n)), axis=1)
        reached += int((shuffled.mean(axis=2).var(axis=1, ddof=1) >= between - 1e-12).sum())
    return 1e4 * between, 1e4 * tasks_part, (1 + reached) / (1 + permutations)


def moved(before: dict, after: dict) -> str:
    """How many tasks the run solved that the warm start did not, and the other way."""
    changes = [float(after[s]) - float(before[s]) for s in before]
    return f"{sum(c > 0 for c in changes)} up, {sum(c < 0 for c in changes)} down"


def from_first_round(run: Path, starts: list[Path], before: dict, after: dict
                     ) -> tuple[dict, dict]:
    """The first round's config and warm-start outcomes, for a run that continued
    ``starts[0]``, which continued ``starts[1]``, and so on back to the first round.

    Prints each round's own gain and how many of its start's outcomes differ from the round
    before's last evaluation (the same weights, exported: none should).
    """
    config: dict = {}
    for start in starts:
        config, start_before, start_after = own_evaluation(start)
        if sorted(start_before) != sorted(before):
            raise SystemExit(f"{run} and {start} were evaluated on different tasks; give the "
                             f"run each one started from, in the same order")
        differ = sum(bool(start_after[s]) != bool(before[s]) for s in before)
        own = gain(before, after)
        print(f"{run}: this round {own[0]:+.1f} ({own[1]:+.1f} to {own[2]:+.1f}), "
              f"{moved(before, after)}; its start repeats {start}'s end on "
              f"{len(before) - differ} of {len(before)} tasks")
        run, before, after = start, start_before, start_after
    return config, before


def judged(run: Path, out: Path, first_seed: int, episodes: int, starts: Sequence[Path] = ()
           ) -> tuple[float, dict[str, float]]:
    """The gain on the run's own tasks, and each task's change (own and new); prints both."""
    config, before, after = own_evaluation(run)
    if starts:
        config, before = from_first_round(run, list(starts), before, after)
    if any(first_seed <= int(s) < first_seed + episodes for s in before):
        raise SystemExit(f"{run}'s own evaluation used seeds from {first_seed}; "
                         f"choose --first-seed past {max(map(int, before))}")
    steps = sorted((run / "checkpoints").glob("step-*"))
    label = f"{run} ({steps[-1].name if steps else 'no checkpoint'}): "
    own = gain(before, after)
    if not episodes:  # the run's own tasks only: nothing to export or play
        print(f"{label}own {len(before)} {own[0]:+.1f} ({own[1]:+.1f} to {own[2]:+.1f}); "
              f"{moved(before, after)}")
        return own[0], {s: float(after[s]) - float(before[s]) for s in before}
    warm = config["model"]["path"]
    model = out / f"{run.name}_model"
    if not model.exists():
        subprocess.run(["agentgym", "export", str(run), "--out", str(model), "--merge"],
                       check=True)
    tag = f"{first_seed}-{episodes}.jsonl"
    warm_new = play(warm, out / f"warm-{warm.strip('/').replace('/', '_')}-{tag}",
                    first_seed, episodes)
    rl_new = play(str(model), out / f"{run.name}-{tag}", first_seed, episodes)
    every_before, every_after = {**before, **warm_new}, {**after, **rl_new}
    fresh, every = gain(warm_new, rl_new), gain(every_before, every_after)
    print(f"{label}own {len(before)} {own[0]:+.1f} ({own[1]:+.1f} to {own[2]:+.1f}); new "
          f"{len(warm_new)} {fresh[0]:+.1f} ({fresh[1]:+.1f} to {fresh[2]:+.1f}); all "
          f"{len(every_before)} {every[0]:+.1f} ({every[1]:+.1f} to {every[2]:+.1f}); "
          f"{moved(every_before, every_after)}; success "
          f"{100 * np.mean([float(v) for v in every_before.values()]):.1f}% -> "
          f"{100 * np.mean([float(v) for v in every_after.values()]):.1f}%", flush=True)
    return own[0], {s: float(every_after[s]) - float(every_before[s]) for s in every_before}


def over_seeds(name: str, values: list[float]) -> str:
    mean, half = seed_t_interval(values)
    return (f"{name}: mean {mean:+.1f} ({mean - half:+.1f} to {mean + half:+.1f}), "
            f"seeds' SD {statistics.stdev(values):.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--against", nargs="+", type=Path, default=[],
                        help="another recipe's runs, seed for seed: the paired differences")
    parser.add_argument("--from", dest="starts", nargs="+", type=Path, action="append",
                        default=[], help="the runs each run started from, seed for seed: "
                        "gains over their warm start, every round together; again for the "
                        "runs those started from")
    parser.add_argument("--episodes", type=int, default=400,
                        help="new tasks to play; 0 judges the runs on their own tasks only")
    parser.add_argument("--first-seed", type=int, default=1_000_200,
                        help="first test-split seed to play (the job evaluates 1,000,000+)")
    parser.add_argument("--permutations", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path("runs/wide_eval"))
    args = parser.parse_args(argv)
    for option, given in (("--against", args.against), *(("--from", s) for s in args.starts)):
        if given and len(given) != len(args.runs):
            raise SystemExit(f"{option} pairs runs seed for seed: give {len(args.runs)} runs, "
                             f"got {len(given)}")
    args.out.mkdir(parents=True, exist_ok=True)
    chains = [list(chain) for chain in zip(*args.starts, strict=True)] or [[]] * len(args.runs)
    groups = [[judged(run, args.out, args.first_seed, args.episodes, chain)
               for run, chain in zip(args.runs, chains, strict=True)]]
    if args.against:
        groups.append([judged(run, args.out, args.first_seed, args.episodes)
                       for run in args.against])
    if len(args.runs) < 2:
        return
    totals = []
    for label, judgements in zip(("runs", "against"), groups, strict=False):
        changes = [c for _, c in judgements]
        tasks = sorted(changes[0])
        if any(sorted(c) != tasks for c in changes):
            raise SystemExit("the runs were judged on different tasks (their own evaluations "
                             "differ); compare runs of one job's evaluation")
        gains = np.array([[c[t] for t in tasks] for c in changes])  # (runs, tasks)
        totals.append([100 * float(g) for g in gains.mean(axis=1)])
        print(over_seeds(f"{label}, own tasks", [own for own, _ in judgements]))
        print(over_seeds(f"{label}, all {len(tasks)} tasks", totals[-1]))
        between, part, p = spread(gains, args.permutations)
        print(f"{label}, all tasks: seeds' variance {between:.1f} = the tasks' draw {part:.1f} "
              f"+ the runs' own {between - part:.1f} (SD {math.sqrt(max(between - part, 0)):.1f}"
              f" points); runs alike on every task: permutation p = {p:.4f}")
    if args.against:
        print(over_seeds("runs - against, all tasks, seed for seed",
                         [a - b for a, b in zip(*totals, strict=True)]))


if __name__ == "__main__":
    sys.exit(main())
