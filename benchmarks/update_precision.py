"""The agent job's RL update in float32 and under bf16 autocast: time and peak memory.

One PPO-clip update (``ppo_update``: two optimizer steps, 1024-token packed micro-batches,
gradient checkpointing, LoRA r 16 on all seven projections, AdamW) of SmolLM2-135M-Instruct
on a batch shaped like a step of ``examples/agent_calendar.yaml``: 4 tasks x 8 full-history
episodes of 3 turns (a 330-token system prompt, tools and task, shared by a task's group;
30-token actions; 80-token tool results). Each precision runs in a fresh process, so its
peak resident memory (model load included) is its own; each is timed twice (the second
update is the figure: the first pays one-off kernel set-up). That the two precisions move the
weights alike is tested (tests/trainers/test_autocast.py), not measured here.

    python benchmarks/update_precision.py [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np
import torch
from results import cpu_model, matmul_peak, write_section

TASKS, GROUP, TURNS = 4, 8, 3
PROMPT, ACTION, OBSERVATION = 330, 30, 80
TITLE = "Update: bf16 autocast (cpu, the agent job's shape)"


def samples(vocab: int) -> list:
    """A step's samples: each episode's turns, each prompt the previous turn's sequence."""
    from agentgym.trainers.batching import Sample

    rng = np.random.default_rng(0)

    def ids(n: int) -> list[int]:
        return [int(x) for x in rng.integers(100, vocab, n)]

    out = []
    for task in range(TASKS):
        prompt = ids(PROMPT)
        for episode in range(GROUP):
            context, advantage = list(prompt), float(rng.normal())
            for turn in range(TURNS):
                action = ids(ACTION)
                out.append(Sample(f"t{task}-{episode}", f"g{task}", turn,
                                  tuple(context + action), len(context), advantage,
                                  tuple(rng.normal(-1.0, 0.3, ACTION))))
                context = context + action + ids(OBSERVATION)
    return out


def run_one(autocast: str) -> dict[str, float]:
    """Two updates in this process; both times and this process's peak memory."""
    from agentgym.policies.models import load_model
    from agentgym.trainers.config import LoraConfig, LossConfig, OptimConfig
    from agentgym.trainers.lora import with_lora
    from agentgym.trainers.models import checkpoint_activations
    from agentgym.trainers.update import Learner, UpdateConfig, ppo_update

    torch.manual_seed(0)
    model, tokenizer = load_model("smollm2")
    lora = LoraConfig(enabled=True, r=16, alpha=32,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                      "up_proj", "down_proj"])
    model = checkpoint_activations(with_lora(model, lora))
    batch = samples(model.config.vocab_size)
    optim = OptimConfig(lr=2e-4, mini_batches=2, max_tokens_per_micro_batch=1024,
                        gradient_checkpointing=True, autocast=autocast)  # type: ignore[arg-type]
    params = [p for p in model.parameters() if p.requires_grad]
    learner = Learner(model, torch.optim.AdamW(params, lr=2e-4), None, torch.device("cpu"),
                      tokenizer.pad_token_id)
    config = UpdateConfig(optim, LossConfig(clip_high=0.28), temperature=1.0, seed=0)
    times = []
    for step in (1, 2):
        start = time.perf_counter()
        ppo_update(learner, batch, config, step=step)
        times.append(time.perf_counter() - start)
    return {"first_s": times[0], "seconds": times[1],
            "trained": sum(s.num_completion_tokens for s in batch),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def render(rows: list[dict], peak: float | None, load: tuple[float, float, float]) -> str:
    """The docs section: the setup, the machine, one row per precision."""
    table = ["| precision | first update s | update s | trained tokens/s | peak RSS MB |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        table.append(f"| {r['autocast']} | {r['first_s']:.1f} | {r['seconds']:.1f} | "
                     f"{r['trained'] / r['seconds']:.1f} | {r['peak_rss_mb']:.0f} |")
    base, fast = rows[0], rows[-1]
    return "\n".join([
        "One PPO-clip update of SmolLM2-135M-Instruct as `examples/agent_calendar.yaml` makes "
        "it (LoRA r 16 on all seven projections, AdamW lr 2e-4, two optimizer steps, packed "
        "1024-token micro-batches, gradient checkpointing), on a synthetic batch of the job's "
        f"shape: {TASKS} tasks x {GROUP} full-history episodes of {TURNS} turns "
        f"({PROMPT}-token prompt shared by a group, {ACTION}-token actions, "
        f"{OBSERVATION}-token tool results). `optim.autocast: none` (float32) against "
        "`bfloat16` (weights, gradients and AdamW state stay float32; "
        "agentgym/trainers/precision.py), each in a fresh process (peak RSS is that "
        "process's, model load included); two updates each, the second timed. "
        f"bf16 is {base['seconds'] / fast['seconds']:.2f}x as fast in "
        f"{fast['peak_rss_mb'] / base['peak_rss_mb']:.0%} of the memory here.",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, Python "
        f"{platform.python_version()}; float32 matmul peak "
        f"{(peak or 0) / 1e9:.1f} GFLOP/s at the start. Load average (1, 5, 15 min) "
        f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} at the start.",
        "Command: `python benchmarks/update_precision.py`",
        "",
        *table,
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--one", metavar="AUTOCAST", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: figures as JSON on the last line
        print(json.dumps(run_one(args.one)))
        return
    load = os.getloadavg()
    peak = matmul_peak(seconds=3.0)
    rows = []
    for autocast in ("none", "bfloat16"):
        proc = subprocess.run([sys.executable, __file__, "--one", autocast],
                              capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["autocast"] = autocast
        rows.append(r)
        print(f"{autocast:8}: update {r['seconds']:.1f} s (first {r['first_s']:.1f} s), "
              f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    body = render(rows, peak, load)
    print(body)
    if not args.no_write:
        write_section(TITLE, body)


if __name__ == "__main__":
    main()
