"""Learning on CPU: train SmolLM2-135M-Instruct with GRPO and plot held-out success.

Runs ``agentgym train`` on a config (default: examples/train_mental_math.yaml), then reads
the run's metrics and writes the curve to docs/learning_curve.png and the figures to
docs/benchmarks.md.

    python benchmarks/learning.py [--config examples/train_mental_math.yaml] [--skip-train]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from results import write_section

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="examples/train_mental_math.yaml")
    parser.add_argument("--run-dir", default="runs/learning")
    parser.add_argument("--skip-train", action="store_true", help="only plot an existing run")
    args = parser.parse_args()
    run_dir = ROOT / args.run_dir
    wall = None
    if not args.skip_train:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "agentgym.cli", "train", args.config,
                        f"run_dir={run_dir}"], cwd=ROOT, check=True)
        wall = time.perf_counter() - start

    from agentgym.trainers.metrics import read_metrics

    rows = read_metrics(run_dir)
    evals = [(r["step"], r["eval/success_rate"], r["eval/reward_mean"]) for r in rows
             if "eval/success_rate" in r]
    train_rows = [r for r in rows if "reward_mean" in r]
    seconds = sum(r.get("rollout_s", 0) + r.get("update_s", 0) for r in train_rows)
    _plot(train_rows, evals, ROOT / "docs" / "learning_curve.png")
    table = ["| step | held-out greedy success | held-out mean reward |", "|---:|---:|---:|"]
    table += [f"| {s} | {sr:.1%} | {rm:.3f} |" for s, sr, rm in evals]
    first, last = evals[0], evals[-1]
    body = "\n".join([
        f"Config: `{args.config}` (SmolLM2-135M-Instruct, GRPO, {len(train_rows)} steps, "
        f"{sum(r['samples'] for r in train_rows) / max(len(train_rows), 1):.0f} trained "
        "samples per step on average).",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, CPU only.",
        f"Command: `python benchmarks/learning.py --config {args.config}`",
        f"Training time (rollouts + updates): {seconds / 60:.1f} min"
        + (f"; wall time with evaluations and loading: {wall / 60:.1f} min." if wall else "."),
        "",
        f"Held-out greedy success: **{first[1]:.1%} before → {last[1]:.1%} after** "
        f"({len(evals)} evaluations, 64 held-out problems each).",
        "",
        *table,
        "",
        "![learning curve](learning_curve.png)",
    ])
    write_section("Learning on CPU (SmolLM2, mental arithmetic)", body)


def _plot(train_rows: list[dict], evals: list[tuple], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in train_rows], [r["success_rate"] for r in train_rows],
            color="#999", label="training success (sampled, T=1)")
    ax.plot([e[0] for e in evals], [e[1] for e in evals], "o-", color="#c33",
            label="held-out success (greedy)")
    ax.set_xlabel("training step")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title("SmolLM2-135M-Instruct, GRPO on agentgym/MentalMath-v0 (CPU)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
