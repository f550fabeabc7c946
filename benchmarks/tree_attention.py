"""An update's passes with prefix-tree attention against the dense N × N mask (CPU).

Reads recorded rollouts (a trajectory JSONL with token ids), makes the trainer's samples
(every advantage 1, so every sample trains), and runs one update's forward and backward
passes over micro-batches of ``--max-tokens`` packed tokens as the agent job does: LoRA r 16
on the seven projections, gradient checkpointing, the PPO-clip loss. Each configuration runs
in its own process (peak resident memory is per process) under tcmalloc where the system has
it, as the training commands run (agentgym/memory.py), in turn with the others, for
``--repeats`` rounds; the table gives the median pass time over the rounds.

    agentgym rollout agentgym/Calendar-v0 --policy vllm:runs/sft_agent_calendar/model \
        --episodes 32 --group-size 8 --seed 0 --kw split=train --kw max_turns=4 \
        --max-tokens 64 --out runs/calendar_rollouts.jsonl
    python benchmarks/tree_attention.py runs/calendar_rollouts.jsonl \
        --model runs/sft_agent_calendar/model [--max-tokens 1024 2048 4096] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

from agentgym.memory import tcmalloc_loaded, with_tcmalloc

TITLE = "Prefix-tree attention in the update (CPU)"


def one(path: str, model_path: str, attention: str, max_tokens: int) -> dict[str, float]:
    """Time one update's passes in this process; its figures as a dict."""
    import numpy as np
    import torch

    from agentgym.jsonl import read_trajectories
    from agentgym.policies.attention import use_grouped_sdpa
    from agentgym.trainers import loss as loss_module
    from agentgym.trainers.batching import micro_batches, samples_from_groups
    from agentgym.trainers.config import LoraConfig
    from agentgym.trainers.lora import with_lora
    from agentgym.trainers.loss import packed_token_logprobs, ppo_clip_loss
    from agentgym.trainers.models import checkpoint_activations, load_trained_model
    from agentgym.trainers.packing import pack_prefix_tree
    from agentgym.types import Group

    torch.manual_seed(0)
    model, tokenizer = load_trained_model(model_path)
    model = with_lora(model, LoraConfig(enabled=True, r=16, alpha=32, target_modules=(
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")))
    checkpoint_activations(model)
    # the trainer's attention (its TransformersPolicy switches the model); "dense" is the
    # packed pass as it ran before the tree plan: the same attention under the N × N mask
    assert use_grouped_sdpa(model), "this model does not run the CPU grouped attention"
    if attention == "dense":
        loss_module.runs_tree_attention = lambda model: False
    model.train()
    groups = Group.from_trajectories(list(read_trajectories(path)))
    ones = {t.id: np.ones(len(t.steps)) for g in groups for t in g.trajectories}
    samples = samples_from_groups(groups, ones)
    tokens = 0
    start = time.perf_counter()
    passes = 0
    for mb in micro_batches(samples, max_tokens, tokenizer.pad_token_id, pack=True):
        tokens += len(pack_prefix_tree([samples[i].input_ids for i in mb.sample_indices]).tokens)
        logprobs, _ = packed_token_logprobs(model, mb.input_ids, mb.attention_mask,
                                            mask=mb.loss_mask)
        loss, _ = ppo_clip_loss(logprobs, logprobs.detach(), mb.advantages, mb.loss_mask,
                                normalizer=mb.normalizer("token_mean"))
        loss.backward()
        passes += 1
    wall = time.perf_counter() - start
    return {"wall_s": wall, "tokens": tokens, "passes": passes, "samples": len(samples),
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
            "tcmalloc": tcmalloc_loaded()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trajectories", help="a trajectory JSONL with recorded token ids")
    parser.add_argument("--model", default="smollm2", help="model folder the rollouts came from")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[1024, 2048, 4096],
                        help="optim.max_tokens_per_micro_batch values to run")
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the configurations")
    parser.add_argument("--one", nargs=2, metavar=("ATTENTION", "MAX_TOKENS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.trajectories, args.model, args.one[0], int(args.one[1]))))
        return
    configs = [("dense", 1024)] + [("tree", m) for m in args.max_tokens]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {c: [] for c in configs}
    load = os.getloadavg()[0]
    for _ in range(args.repeats):
        for attention, max_tokens in configs:
            out = subprocess.run([sys.executable, __file__, args.trajectories, "--model",
                                  args.model, "--one", attention, str(max_tokens)],
                                 check=True, capture_output=True, text=True,
                                 env=with_tcmalloc(os.environ)).stdout
            result = json.loads(out.strip().splitlines()[-1])
            runs[(attention, max_tokens)].append(result)
            print(attention, max_tokens, result, flush=True)
    first = runs[configs[0]][0]
    base = statistics.median(r["wall_s"] for r in runs[configs[0]])
    lines = [f"`{args.trajectories}` ({first['samples']} samples), model `{args.model}`, "
             f"LoRA r 16 on the seven projections, gradient checkpointing, float32, "
             f"{'tcmalloc' if first['tcmalloc'] else 'glibc malloc'}, "
             f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), load "
             f"average {load:.1f} at the start; median of {args.repeats} rounds, each "
             "configuration in its own process in turn (`python benchmarks/tree_attention.py "
             f"{args.trajectories} --model {args.model} --max-tokens "
             f"{' '.join(map(str, args.max_tokens))} --repeats {args.repeats}`).", "",
             "| attention | micro-batch tokens | passes | tokens forwarded | update passes "
             "(s, each round) | speed-up | peak resident |", "|---|---:|---:|---:|---|---:|---:|"]
    for attention, max_tokens in configs:
        rs = runs[(attention, max_tokens)]
        wall = statistics.median(r["wall_s"] for r in rs)
        each = ", ".join(f"{r['wall_s']:.1f}" for r in rs)
        lines.append(f"| {attention} | {max_tokens} | {rs[0]['passes']:.0f} | "
                     f"{rs[0]['tokens']:,.0f} | {wall:.1f} ({each}) | {base / wall:.2f}x | "
                     f"{max(r['peak_gb'] for r in rs):.2f} GB |")
    body = "\n".join(lines)
    print(body)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from results import write_section
    write_section(TITLE, body)


if __name__ == "__main__":
    main()
