"""How much signal a step gets with the sampling plug-ins: a before/after on one env.

Three arms train SmolLM2-135M-Instruct (the embedded default) on MentalMath (a small sum
in plain text, a second try after a miss) with GRPO, each for ``--steps`` steps of
``--tasks`` groups of ``--group-size``, over ``--seeds`` run seeds:

- ``baseline``: the next tasks in order (zero-variance groups are trained as they are);
- ``dynamic_sampling``: degenerate groups replaced by fresh tasks (``max_groups`` = tasks);
- ``difficulty_pool``: half of each step's tasks re-drawn from tasks whose rollouts
  disagreed, a tenth from tasks none solved.

A group whose rollouts all scored alike gives GRPO no signal. Per step the script reads the
share of such groups in the trained batch and the rollouts the step spent, and reports the
mean over steps and seeds with a 95% t interval over seeds (``agentgym.evaluation.stats``).

    python benchmarks/sampling.py                 # writes its section of docs/sampling.md
    python benchmarks/sampling.py --steps 2 --seeds 1 --no-write
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine_note, write_section  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "sampling.md"
ARMS = {
    "baseline": [],
    "dynamic_sampling": ["methods.dynamic_sampling.max_groups={tasks}"],
    "difficulty_pool": ["methods.difficulty_pool.medium=0.5",
                        "methods.difficulty_pool.hard=0.1"],
}


def run_arm(arm: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    """One training run; its per-step signal share and rollouts, averaged over steps."""
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    overrides = [f"run_dir={root / f'{arm}-{seed}'}", f"seed={seed}", f"steps={args.steps}",
                 f"save_every={args.steps}", "tensorboard=false",
                 "env.id=agentgym/MentalMath-v0", f"rollout.tasks_per_step={args.tasks}",
                 f"rollout.group_size={args.group_size}", "rollout.max_tokens=16",
                 "optim.lr=1e-5", *(o.format(tasks=args.tasks) for o in ARMS[arm])]
    start = time.perf_counter()
    rows = read_metrics(train(load_config(None, overrides)))
    seconds = time.perf_counter() - start
    degenerate, rollouts = [], []
    for r in rows:
        zero = r["zero_variance_groups"] * args.tasks  # of the step's own groups
        drawn = r.get("dynamic/drawn_groups", 0.0)
        left = zero - r.get("dynamic/refilled_groups", 0.0)
        degenerate.append(left / args.tasks)  # in the trained batch
        rollouts.append((args.tasks + drawn) * args.group_size)
    return {"degenerate": float(np.mean(degenerate)), "rollouts": float(np.mean(rollouts)),
            "success": float(np.mean([r["success_rate"] for r in rows])),
            "seconds": seconds / len(rows)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    from agentgym.evaluation.stats import seed_t_interval

    load = os.getloadavg()
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:
            for seed in range(args.seeds):
                results.setdefault(arm, []).append(run_arm(arm, seed, args, Path(tmp)))
                print(arm, seed, results[arm][-1], flush=True)
    lines = ["| arm | groups without signal in the trained batch | rollouts per step | "
             "training success | s per step |", "|---|---|---|---|---|"]
    for arm, rows in results.items():
        share = [r["degenerate"] for r in rows]
        mean, half = seed_t_interval(share)
        lines.append(f"| `{arm}` | {mean:.0%} ± {half:.0%} | "
                     f"{np.mean([r['rollouts'] for r in rows]):.1f} | "
                     f"{np.mean([r['success'] for r in rows]):.0%} | "
                     f"{np.mean([r['seconds'] for r in rows]):.0f} |")
    body = (f"`python benchmarks/sampling.py --steps {args.steps} --seeds {args.seeds} "
            f"--tasks {args.tasks} --group-size {args.group_size}`: SmolLM2-135M-Instruct, "
            f"MentalMath, GRPO, {args.tasks} groups of {args.group_size} per step; means over "
            f"{args.steps} steps and {args.seeds} run seeds, ± the half-width of a "
            "95% t interval over seeds.\n\n" + "\n".join(lines) + "\n\n" + machine_note(load))
    print(body)
    if not args.no_write:
        write_section("Measured: signal per step on MentalMath", body, DOC)


if __name__ == "__main__":
    main()
