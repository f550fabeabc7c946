"""Does step-level credit assignment help? GRPO vs GiGPO vs HGPO vs SALT, same budget.

Trains SmolLM2-135M-Instruct from the same initial weights, seeds and task order with each
estimator (window context, K = 1, so HGPO has its history levels), then reports held-out
greedy success before and after, and the training curves (docs/estimators_curve.png).

    python benchmarks/compare_estimators.py [--steps 12] [--env agentgym/MentalMath-v0]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from results import write_section

ROOT = Path(__file__).resolve().parent.parent
ESTIMATORS = ("grpo", "gigpo", "hgpo", "salt")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--config", default="examples/train_mental_math.yaml")
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    args = parser.parse_args()

    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    results = {}
    for name in args.estimators.split(","):
        run_dir = ROOT / "runs" / f"compare-{name}"
        if not (run_dir / "metrics.jsonl").exists():
            cfg = load_config(ROOT / args.config, [
                f"run_dir={run_dir}", f"steps={args.steps}", f"save_every={args.steps}",
                f"eval_every={args.steps // 2}", f"algorithm.estimator={name}",
                "algorithm.options={}", "rollout.context=window", "rollout.history_length=1",
                "tensorboard=false"])
            start = time.perf_counter()
            train(cfg)
            print(f"{name}: {time.perf_counter() - start:.0f} s")
        results[name] = read_metrics(run_dir)
    _plot(results, ROOT / "docs" / "estimators_curve.png")
    table = ["| estimator | held-out success before | mid | after | mean training success |",
             "|---|---:|---:|---:|---:|"]
    for name, rows in results.items():
        evals = [r["eval/success_rate"] for r in rows if "eval/success_rate" in r]
        train_success = [r["success_rate"] for r in rows if "success_rate" in r]
        table.append(f"| {name} | " + " | ".join(f"{e:.1%}" for e in evals[:3])
                     + f" | {sum(train_success) / len(train_success):.1%} |")
    body = "\n".join([
        f"SmolLM2-135M-Instruct from the same weights, seed 0 and task order for every estimator; "
        f"`{args.config}` with {args.steps} steps, window context K = 1, estimator defaults. "
        "One seed per estimator (CPU budget): differences of a few points are within noise.",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, CPU only.",
        f"Command: `python benchmarks/compare_estimators.py --steps {args.steps}`",
        "",
        *table,
        "",
        "![estimator comparison](estimators_curve.png)",
    ])
    write_section("Estimator comparison (does step-level credit help?)", body)


def _plot(results: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rows in results.items():
        train_rows = [r for r in rows if "success_rate" in r]
        ax.plot([r["step"] for r in train_rows], [r["success_rate"] for r in train_rows],
                label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel("training success rate (sampled)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
