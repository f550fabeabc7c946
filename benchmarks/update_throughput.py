"""One PPO-clip update's tokens/s with SmolLM2-135M-Instruct (CPU here; CUDA when present).

Synthetic samples shaped like a rollout step (prompt + completion ids from the model's
vocabulary), trained with the loop's own batching and loss; reports forward+backward tokens
per second over the whole update (micro-batches, accumulation, optimizer step).

    python benchmarks/update_throughput.py [--samples 64] [--prompt 64] [--completion 32]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
from results import write_section

from agentgym.policies.models import load_model
from agentgym.trainers.batching import Sample, micro_batches
from agentgym.trainers.loss import ppo_clip_loss, token_logprobs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_model("smollm2", device=device)
    model.train()
    rng = np.random.default_rng(0)
    length = args.prompt + args.completion
    samples = [Sample(f"t{i}", "g", 0, tuple(int(x) for x in rng.integers(100, 40000, length)),
                      args.prompt, float(rng.normal()), tuple([-1.0] * args.completion))
               for i in range(args.samples)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        optimizer.zero_grad()
        for mb in micro_batches(samples, args.max_tokens, tokenizer.pad_token_id):
            mb = mb.to(device)
            logprobs, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, mask=mb.loss_mask)
            loss, _ = ppo_clip_loss(logprobs, mb.old_logprobs, mb.advantages, mb.loss_mask,
                                    normalizer=mb.normalizer("token_mean"))
            loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    tokens = args.samples * length
    best = min(times)
    print(f"{tokens} tokens per update: {best:.1f} s, {tokens / best:,.0f} tokens/s ({device})")
    body = "\n".join([
        f"SmolLM2-135M-Instruct, float32, full fine-tune, {args.samples} samples of "
        f"{args.prompt} prompt + {args.completion} completion tokens, micro-batches of "
        f"{args.max_tokens} padded tokens, AdamW step included; best of 3.",
        f"Machine: {os.cpu_count()} cores ({device}), torch {torch.__version__}, "
        f"Python {platform.python_version()}.",
        "Command: `python benchmarks/update_throughput.py`",
        "",
        "| device | tokens per update | seconds | tokens/s |",
        "|---|---:|---:|---:|",
        f"| {device} | {tokens} | {best:.1f} | {tokens / best:,.0f} |",
    ])
    write_section(f"Update throughput ({device})", body)


if __name__ == "__main__":
    main()
