"""Generation throughput of TransformersPolicy on CPU: dynamic batching vs one request at a time.

SmolLM2-135M-Instruct (the embedded model) completes Sokoban prompts (the env's first
observation with its four tools, one board per seed), ``temperature=1.0``, ``max_tokens=32``.
The same requests, each with its own seed (so both settings sample the same tokens), are
sent as concurrent ``generate`` calls, as a rollout of many episodes would: with dynamic
batching (``max_batch_size=64``), with it but without sharing the common prompt prefix, and
with ``max_batch_size=1``. Completion tokens per second of wall time go to docs/benchmarks.md.

    python benchmarks/generation.py [--requests 64] [--max-tokens 32] [--sequential 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time

from results import cpu_model, write_section

import agentgym
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.policies.hf import TransformersPolicy

TITLE = "Generation (transformers backend, CPU)"


async def sokoban_requests(n: int, max_tokens: int) -> list[GenerationRequest]:
    """One request per Sokoban board: the first observation and the move tools."""
    requests = []
    for seed in range(n):
        env = agentgym.make("agentgym/Sokoban-v0")
        messages, _ = await env.reset(seed=seed)
        await env.aclose()
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed)
        requests.append(GenerationRequest(tuple(messages), tuple(env.tools), params=params))
    return requests


async def measure(policy: TransformersPolicy, requests: list[GenerationRequest]
                  ) -> tuple[float, list[Completion]]:
    """Wall seconds to answer ``requests`` sent as concurrent one-request calls."""
    start = time.perf_counter()
    results = await asyncio.gather(*(policy.generate([r]) for r in requests))
    return time.perf_counter() - start, [c for [c] in results]


async def main(args: argparse.Namespace) -> None:
    import torch

    load_before = os.getloadavg()[0]  # other processes on the machine skew the figures
    requests = await sokoban_requests(args.requests, args.max_tokens)
    batched = TransformersPolicy.load("smollm2", max_batch_size=64)
    model, tokenizer = batched.model, batched.tokenizer
    settings = [
        ("dynamic batching (max_batch_size=64)", batched, requests),
        ("dynamic batching, no prefix sharing",
         TransformersPolicy(model, tokenizer, max_batch_size=64, share_prefix=False), requests),
        ("one at a time (max_batch_size=1)",
         TransformersPolicy(model, tokenizer, max_batch_size=1), requests[:args.sequential]),
    ]
    await batched.generate(requests[:2])  # warm-up: first calls pay one-off costs
    rows = []
    for name, policy, subset in settings:
        before = policy.stats.batches
        seconds, out = await measure(policy, subset)
        tokens = sum(len(c.completion_ids) for c in out)
        rows.append((name, len(subset), policy.stats.batches - before, tokens, seconds))
        print(f"{name}: {len(subset)} requests, {tokens} tokens in {seconds:.1f} s "
              f"= {tokens / seconds:.1f} tokens/s")
        await policy.aclose()
    prompt_tokens = sum(len(c.prompt_ids) for c in out) / len(out)
    rate = [t / s for *_, t, s in rows]
    speedup, unshared = rate[0] / rate[2], rate[1] / rate[2]
    print(f"speedup: {speedup:.1f}x ({unshared:.1f}x without prefix sharing)")

    load_after = os.getloadavg()[0]
    busy = max(load_before, load_after) > (os.cpu_count() or 1)
    note = ("\nOther jobs shared the machine during this run (load above the core count); "
            "that slows\nsmall one-request steps most. Rerun on an idle machine for clean "
            "figures.\n") if busy else ""
    table = "\n".join(f"| {n} | {k} | {b} | {t} | {s:.1f} | {t / s:.1f} |"
                      for n, k, b, t, s in rows)
    body = f"""
SmolLM2-135M-Instruct (float32) on Sokoban prompts ({prompt_tokens:.0f} prompt tokens on
average: instructions, board and four tools), `temperature=1.0`, `max_tokens={args.max_tokens}`,
a seed per request. Each request is its own concurrent `generate` call, as in a rollout.
Machine: {os.cpu_count()} cores ({cpu_model()}), {torch.get_num_threads()} torch threads,
torch {torch.__version__}, Python {platform.python_version()}; 1-minute load average
{load_before:.1f} before and {load_after:.1f} after the run.
Command: `python benchmarks/generation.py --requests {args.requests} --max-tokens \
{args.max_tokens} --sequential {args.sequential}`

| setting | requests | batches | completion tokens | seconds | tokens/s |
|---|---:|---:|---:|---:|---:|
{table}

Dynamic batching: {speedup:.1f}x the tokens/s of one request at a time ({unshared:.1f}x when
the prompt prefix common to the batch, here the system prompt, tools and instructions, is
not shared). With {prompt_tokens:.0f}-token prompts and {args.max_tokens}-token answers,
prefill is a large part of the work, so sharing the prefix matters as well as batching the
decode steps.
{note}"""
    write_section(TITLE, body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64, help="concurrent requests")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per completion")
    parser.add_argument("--sequential", type=int, default=64,
                        help="how many of the requests the one-at-a-time run answers")
    asyncio.run(main(parser.parse_args()))
