"""Overlap gain of async (one-step-off) training against synchronous training, on CPU.

SmolLM2-135M-Instruct on MentalMath with the same samples per update (tasks_per_step x
group_size rollouts). Time per update is the steady-state wall time between consecutive
logged steps (model loading and the first collection excluded), so it is collection +
update for the synchronous loop, and max(collection, update) plus contention for the
overlapped one.

    python benchmarks/async_training.py [--steps 4] [--tasks 4] [--group 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import numpy as np
from results import write_section

from agentgym.trainers import loop
from agentgym.trainers.config import load_config
from agentgym.trainers.metrics import MetricsLog, read_metrics


def run(overrides: list[str]) -> tuple[float, list[dict]]:
    stamps: list[float] = []
    original = MetricsLog.log

    def log(self, step, metrics):
        stamps.append(time.perf_counter())
        original(self, step, metrics)

    MetricsLog.log = log
    try:
        out = loop.train(load_config(None, overrides))
    finally:
        MetricsLog.log = original
    return float(np.mean(np.diff(stamps))), read_metrics(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    args = parser.parse_args()
    base = ["model.path=smollm2", f"steps={args.steps}", f"save_every={args.steps}",
            "tensorboard=false", "env.id=agentgym/MentalMath-v0", "env.kwargs.low=2",
            "env.kwargs.high=50", "env.kwargs.ops=+", f"rollout.tasks_per_step={args.tasks}",
            f"rollout.group_size={args.group}", "rollout.max_tokens=24", "optim.lr=2e-5"]
    results = {}
    for name, extra in (("sync", []), ("async, one-step-off", [
            "async_training.enabled=true", "async_training.max_staleness=1"])):
        with tempfile.TemporaryDirectory() as tmp:
            per_update, rows = run(base + [f"run_dir={tmp}/run"] + extra)
        results[name] = (per_update, rows)
        print(name, f"{per_update:.1f} s per update",
              [round(r.get("update_s", 0), 1) for r in rows],
              [round(r.get("rollout_s", 0), 1) for r in rows], flush=True)
    sync, overlap = results["sync"][0], results["async, one-step-off"][0]
    rows = ["| loop | s per update (steady state) | rollout wait s | update s | staleness mean |"
            " IS weight std |", "|---|---|---|---|---|---|"]
    for name, (per, ms) in results.items():
        tail = ms[1:] or ms
        rows.append(f"| {name} | {per:.1f} | {np.mean([m['rollout_s'] for m in tail]):.1f} | "
                    f"{np.mean([m['update_s'] for m in tail]):.1f} | "
                    f"{np.mean([m.get('async/staleness_mean', 0) for m in tail]):.2f} | "
                    f"{np.mean([m.get('async/is_weight_std', 0) for m in tail]):.3f} |")
    load = os.getloadavg()[0]
    write_section("Async vs sync training (CPU, SmolLM2)", "\n".join([
        f"`python benchmarks/async_training.py --steps {args.steps} --tasks {args.tasks} "
        f"--group {args.group}`: SmolLM2-135M-Instruct, MentalMath, {args.tasks * args.group} "
        f"rollouts per update (24 tokens max), {os.cpu_count()} CPU cores "
        f"({platform.processor() or platform.machine()}). Steady-state time per update over "
        f"steps 2..{args.steps}; `rollout wait` is how long the loop waited for the step's "
        "rollouts (in async mode they were mostly collected during the previous update).",
        "", *rows, "",
        f"Overlap gain: {sync / overlap:.2f}x ({sync:.1f} s -> {overlap:.1f} s per update). "
        f"Taken on a shared machine (load average {load:.1f} on {os.cpu_count()} cores): "
        "generation and the update split the same two cores here (each gets half the torch "
        "threads), so the gain is bounded; with generation on its own GPU or Ray node the "
        "collection time hides behind the update.",
    ]))


if __name__ == "__main__":
    main()
