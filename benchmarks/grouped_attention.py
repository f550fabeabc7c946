"""Decoding with grouped SDPA vs transformers' ``sdpa`` (transformers backend, CPU).

SmolLM2-135M-Instruct (9 query heads over 3 key/value heads) plays E calendar episodes
(``agentgym/Calendar-v0``, test split) at once, greedy, full history, at most ``max_tokens``
a turn and 4 turns, as a held-out evaluation of the agent job does. The same episodes run
twice in one process on the same weights: with transformers' ``sdpa`` attention, which
copies each layer's keys and values to every query head at every step when a mask is given,
and with :mod:`agentgym.policies.attention`'s grouped call (the backend's default on a CPU).
Greedy outputs are checked to be identical; wall time, completion tokens/s and CPU seconds
spent in the kernel (``sys``) go to docs/benchmarks.md with the machine and its load.

    python benchmarks/grouped_attention.py [--episodes 32] [--max-tokens 64] [--model PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import time

from results import cpu_model, write_section

import agentgym
from agentgym.context import ContextConfig
from agentgym.policies.attention import NAME
from agentgym.policies.base import SamplingParams
from agentgym.policies.hf import TransformersPolicy
from agentgym.rollout import LMAgent, RolloutConfig, run_groups

TITLE = "Grouped-query attention in decoding (transformers backend, CPU)"
HEADER = ("| attention | wall s | completion tokens | completion tokens/s | CPU s user | "
          "CPU s sys | success |\n|---|---:|---:|---:|---:|---:|---:|")


async def play(policy: TransformersPolicy, args: argparse.Namespace) -> tuple[float, list]:
    """Wall seconds and trajectories of the episodes."""
    agent = LMAgent(policy, ContextConfig(mode="full"),
                    SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    start = time.perf_counter()
    trajs = await run_groups(lambda: agentgym.make("agentgym/Calendar-v0", split="test"),
                             agent, range(1_000_000, 1_000_000 + args.episodes),
                             RolloutConfig(max_steps=4, step_timeout=None, episode_timeout=None))
    return time.perf_counter() - start, trajs


async def main(args: argparse.Namespace) -> None:
    import torch

    load_before = os.getloadavg()[0]
    policy = TransformersPolicy.load(args.model)
    model = policy.model
    threads = torch.get_num_threads()
    rows, outputs = [], []
    for name in ("sdpa", NAME):
        model.set_attn_implementation(name)
        policy.prefix_store.clear()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        before = policy.stats.completion_tokens
        seconds, trajs = await play(policy, args)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        tokens = policy.stats.completion_tokens - before
        success = sum(t.outcome_reward or 0.0 for t in trajs) / len(trajs)
        rows.append((name, seconds, tokens, cpu1.ru_utime - cpu0.ru_utime,
                     cpu1.ru_stime - cpu0.ru_stime, success))
        outputs.append([[st.tokens.completion_ids for st in t.steps] for t in trajs])
        print(f"{name}: {seconds:.1f} s wall, {tokens} completion tokens, "
              f"{tokens / seconds:.1f} tokens/s, success {success:.1%}", flush=True)
    same = outputs[0] == outputs[1]
    print(f"greedy outputs identical: {same}")
    await policy.aclose()
    load_after = os.getloadavg()[0]
    table = "\n".join(f"| `{n}` | {sec:.1f} | {tok} | {tok / sec:.1f} | {user:.0f} | "
                      f"{system:.0f} | {ok:.1%} |" for n, sec, tok, user, system, ok in rows)
    (_, slow, *_), (_, fast, *_) = rows
    body = f"""
`{args.model}` (float32) plays {args.episodes} calendar episodes at once (test split, seeds
1,000,000+), greedy, full history, at most {args.max_tokens} tokens a turn and 4 turns; both
settings run in one process on the same weights, each with an empty prefix cache; greedy
outputs identical: **{same}**.
Machine: {os.cpu_count()} cores ({cpu_model()}), torch threads: {threads}, torch
{torch.__version__}, Python {platform.python_version()}; 1-minute load average
{load_before:.1f} before and {load_after:.1f} after the run (`uptime`).
Command: `python benchmarks/grouped_attention.py --episodes {args.episodes} --max-tokens \
{args.max_tokens} --model {args.model}`

{HEADER}
{table}

The grouped call took the episodes {slow / fast:.1f}x faster ({slow:.1f} s → {fast:.1f} s).
transformers' `sdpa` repeats the keys and values to every query head whenever a mask is
given, and the decoder always gives one (left-padded rows), so each step copied every
layer's whole cache three times over; the kernel CPU time went with the copy, whose buffers
were allocated and freed at every step.
"""
    write_section(TITLE, body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32, help="episodes played at once")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per turn")
    parser.add_argument("--model", default="smollm2",
                        help="smollm2 (embedded) or a local checkpoint folder")
    asyncio.run(main(parser.parse_args()))
