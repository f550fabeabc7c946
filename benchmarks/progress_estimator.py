"""SPA progress-estimator training time per 1k steps on CPU (tiny model and SmolLM2).

Trajectories are shaped like full-context agent episodes: a first prompt of ``--prompt``
tokens, then ``--steps`` turns of ``--completion`` action tokens each followed by
``--observation`` observation tokens, with every step's prompt extending the previous one
(as the token-exact ``full`` context records them), so a trajectory packs into one row of
prompt + steps·completion + (steps − 1)·observation tokens. ``--rollouts FILE`` times a
recorded trajectory JSONL instead. Fitting is one epoch of the estimator's own loop
(MSE of R − Σĉ, AdamW, grad clipping); scoring is the no-grad pass the trainer runs to
annotate a step's groups. Figures are extrapolated to 1,000 steps.

    python benchmarks/progress_estimator.py [--models tiny,smollm2] [--trajectories 32]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
from results import write_section

from agentgym.jsonl import read_trajectories
from agentgym.policies.models import load_tokenizer, tiny_model
from agentgym.trainers.config import ProgressConfig
from agentgym.trainers.progress import ProgressModel, pack
from agentgym.trainers.progress_train import ProgressFitter
from agentgym.types import Message, Step, StepResult, StepTokens, Trajectory


def episodes(n: int, args: argparse.Namespace) -> list[Trajectory]:
    """Full-context trajectories of random token ids with the shape in the module docstring."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        context = [int(x) for x in rng.integers(100, 40_000, args.prompt)]
        steps = []
        for k in range(args.steps):
            action = [int(x) for x in rng.integers(100, 40_000, args.completion)]
            steps.append(Step(k, Message("assistant", ""), StepResult(()),
                              StepTokens(tuple(context), tuple(action))))
            context = context + action + [int(x) for x in
                                          rng.integers(100, 40_000, args.observation)]
        out.append(Trajectory(f"t{i}", "task", f"g{i // 4}", (), tuple(steps),
                              outcome_reward=float(rng.integers(0, 2))))
    return out


def model(name: str) -> ProgressModel:
    if name == "tiny":  # the test suite's tiny Llama, with SmolLM2's vocabulary
        lm = tiny_model(tokenizer=load_tokenizer("smollm2"), hidden_size=32, layers=1, heads=2)
        return ProgressModel.from_causal_lm(lm, source="tiny")
    return ProgressModel.load(name)


def measure(name: str, trajs: list[Trajectory], batch_size: int) -> dict[str, float]:
    torch.manual_seed(0)
    fitter = ProgressFitter(model(name), ProgressConfig(batch_size=batch_size))
    fitter.fit(trajs[:batch_size], 1)  # warm-up: allocator, optimizer state
    steps = sum(len(t.steps) for t in trajs)
    start = time.perf_counter()
    fitter.fit(trajs, 1)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    fitter.score(trajs)
    score_s = time.perf_counter() - start
    tokens = sum(p.num_tokens for p in map(pack, trajs))
    return {"steps": steps, "tokens": tokens, "fit_s": fit_s, "score_s": score_s,
            "load": os.getloadavg()[0], "fit_tokens_per_s": tokens / fit_s,
            "fit_per_1k": fit_s * 1000 / steps, "score_per_1k": score_s * 1000 / steps}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=200)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--completion", type=int, default=24)
    parser.add_argument("--observation", type=int, default=40)
    parser.add_argument("--rollouts", default=None, help="time a recorded JSONL instead")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.rollouts:
        trajs = [t for t in read_trajectories(args.rollouts) if t.scorable and t.steps]
        shape = f"the {len(trajs)} trajectories of `{args.rollouts}`"
    else:
        trajs = episodes(args.trajectories, args)
        shape = (f"{args.trajectories} synthetic full-context trajectories of {args.steps} "
                 f"steps (first prompt {args.prompt} tokens, {args.completion}-token actions, "
                 f"{args.observation}-token observations)")
    rows = []
    for name in args.models.split(","):
        r = measure(name, trajs, args.batch_size)
        print(f"{name}: {r['steps']} steps, {r['tokens']} tokens: fit {r['fit_s']:.1f} s "
              f"({r['fit_per_1k']:.1f} s per 1k steps), score {r['score_s']:.1f} s "
              f"({r['score_per_1k']:.1f} s per 1k steps)")
        rows.append(f"| {name} | {r['steps']} | {r['tokens']} | {r['fit_s']:.1f} | "
                    f"{r['fit_tokens_per_s']:,.0f} | {r['fit_per_1k']:.1f} | "
                    f"{r['score_per_1k']:.1f} | {r['load']:.1f} |")
    body = "\n".join([
        f"One fitting epoch (batch of {args.batch_size} trajectories, AdamW, float32, full "
        f"fine-tune of backbone + head) and one no-grad scoring pass over {shape}; a trajectory "
        "packs into one row. Seconds per 1k steps are extrapolated from these runs.",
        f"Machine: {os.cpu_count()} cores shared with other jobs while measuring (the load "
        "average in the last column counts runnable processes: the figures are noisy and "
        f"pessimistic), torch {torch.__version__} with {args.threads} thread(s), "
        f"Python {platform.python_version()}.",
        f"Command: `python benchmarks/progress_estimator.py --models {args.models} "
        f"--trajectories {args.trajectories} --threads {args.threads}`",
        "",
        "| model | steps | tokens | fit seconds | fit tokens/s | fit s per 1k steps "
        "| score s per 1k steps | load average |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ])
    write_section("SPA progress estimator training (cpu)", body)


if __name__ == "__main__":
    main()
