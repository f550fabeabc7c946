"""Agent-job RL runs judged on more held-out calendars than their own 200: how much of a
seed's gain was its evaluation's draw of tasks, and how much the run.

    python benchmarks/calendar_wide_eval.py runs/wd_rl_s0 runs/wd_rl_s1 [...] [--episodes 400]

For every run folder: its last checkpoint is exported with merged weights (``agentgym
export RUN --out OUT/RUN_model --merge``), and that model and the run's warm start
(``model.path``) play ``--episodes`` greedy test-split calendars from ``--first-seed`` with
the job's settings (``agentgym rollout ... --temperature 0 --max-tokens 64 --kw
max_turns=4``), seeds the run's own evaluation did not use. Those outcomes join the run's
own (``heldout/step-0.json`` and its last step's), so each run is judged on 200 + episodes
tasks. Every file is kept under ``--out`` and a run whose files are there is not played
again, so the script resumes.

It prints each run's gain on its own tasks, on the new ones and on all, with 95% paired
bootstrap intervals, then over the runs: the mean gain with its t-interval over seeds, the
seeds' standard deviation on 200 tasks and on all, and the part of that spread the
evaluation's tasks explain (each gain's bootstrap variance; what is left is the runs' own).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

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


def gain(before: dict, after: dict) -> tuple[float, float, float, float]:
    """Gain in points, its interval, and its bootstrap variance (from the interval)."""
    seeds = sorted(before)
    g, low, high = paired_bootstrap([float(before[s]) for s in seeds],
                                    [float(after[s]) for s in seeds])
    return 100 * g, 100 * low, 100 * high, (100 * (high - low) / (2 * 1.96)) ** 2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--first-seed", type=int, default=1_000_200,
                        help="first test-split seed to play (the job evaluates 1,000,000+)")
    parser.add_argument("--out", type=Path, default=Path("runs/wide_eval"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    new = range(args.first_seed, args.first_seed + args.episodes)
    own_gains, all_gains, variances = [], [], []
    for run in args.runs:
        config, before, after = own_evaluation(run)
        if any(int(s) in new for s in before):
            raise SystemExit(f"{run}'s own evaluation used seeds from {args.first_seed}; "
                             f"choose --first-seed past {max(map(int, before))}")
        warm = config["model"]["path"]
        model = args.out / f"{run.name}_model"
        steps = sorted((run / "checkpoints").glob("step-*"))
        if not model.exists():
            subprocess.run(["agentgym", "export", str(run), "--out", str(model), "--merge"],
                           check=True)
        tag = f"{args.first_seed}-{args.episodes}.jsonl"
        warm_new = play(warm, args.out / f"warm-{warm.strip('/').replace('/', '_')}-{tag}",
                        args.first_seed, args.episodes)
        rl_new = play(str(model), args.out / f"{run.name}-{tag}", args.first_seed, args.episodes)
        own, fresh = gain(before, after), gain(warm_new, rl_new)
        every = gain({**before, **warm_new}, {**after, **rl_new})
        own_gains.append(own[0])
        all_gains.append(every[0])
        variances.append(every[3])
        print(f"{run} ({steps[-1].name if steps else 'no checkpoint'}): own {len(before)} "
              f"{own[0]:+.1f} ({own[1]:+.1f} to {own[2]:+.1f}); new {len(warm_new)} "
              f"{fresh[0]:+.1f} ({fresh[1]:+.1f} to {fresh[2]:+.1f}); all "
              f"{len(before) + len(warm_new)} {every[0]:+.1f} ({every[1]:+.1f} to {every[2]:+.1f})",
              flush=True)
    if len(args.runs) < 2:
        return
    for name, values in (("own tasks", own_gains), ("all tasks", all_gains)):
        mean, half = seed_t_interval(values)
        print(f"over {len(values)} runs, {name}: mean {mean:+.1f} ({mean - half:+.1f} to "
              f"{mean + half:+.1f}), seeds' SD {statistics.stdev(values):.1f}")
    spread, tasks = statistics.variance(all_gains), statistics.mean(variances)
    print(f"all tasks: seeds' variance {spread:.1f} = tasks' {tasks:.1f} + runs' "
          f"{spread - tasks:.1f} (runs' SD {math.sqrt(max(spread - tasks, 0.0)):.1f})")


if __name__ == "__main__":
    sys.exit(main())
