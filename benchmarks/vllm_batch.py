"""How many sequences vLLM's CPU engine should decode together for a held-out evaluation.

Plays the agent job's held-out evaluation (200 greedy test-split calendars of
agentgym/Calendar-v0, 4 turns, 64 tokens a turn, every episode in flight) once per
``max_num_seqs`` (``model.max_batch_size`` in a training config), each on a fresh engine, and
prints the wall of the episodes beside the engine's start. Writes the section "vLLM's batch
on the calendar evaluation" of docs/benchmarks.md (``--no-write``: print only).

    python benchmarks/vllm_batch.py                          # the embedded model: 32 64 200
    python benchmarks/vllm_batch.py runs/sft_agent_calendar/model --sizes 64 128
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine_line, write_section  # noqa: E402

import agentgym
from agentgym.context import ContextConfig
from agentgym.policies.base import SamplingParams
from agentgym.policies.models import embedded_model_dir
from agentgym.policies.vllm import VLLMPolicy
from agentgym.rollout import LMAgent, RolloutConfig, run_groups

ENV = "agentgym/Calendar-v0"


def play(model: str, max_num_seqs: int, episodes: int) -> tuple[float, float, int]:
    """(engine start s, episodes s, episodes solved) on a fresh engine."""
    start = time.perf_counter()
    policy = VLLMPolicy(model, max_num_seqs=max_num_seqs)
    started = time.perf_counter()
    agent = LMAgent(policy, ContextConfig(mode="full"),
                    SamplingParams(temperature=0, max_tokens=64))
    config = RolloutConfig(concurrency=episodes, max_steps=4)

    async def main() -> list[agentgym.Trajectory]:
        try:
            return await run_groups(lambda: agentgym.make(ENV, split="test"), agent,
                                    range(episodes), config, env_id=ENV)
        finally:
            await policy.aclose()

    trajs = asyncio.run(main())
    solved = sum((t.outcome_reward or 0) > 0 for t in trajs)
    return started - start, time.perf_counter() - started, solved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=None,
                        help="a model folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 200])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    model = args.model or str(embedded_model_dir())
    first_load = os.getloadavg()[0]
    rows = []
    for size in args.sizes:
        load = os.getloadavg()[0]
        start_s, play_s, solved = play(model, size, args.episodes)
        print(f"max_num_seqs {size}: {args.episodes} episodes {play_s:.1f} s (engine start "
              f"{start_s:.1f} s), {solved} solved; load average {load:.2f} before", flush=True)
        rows.append(f"| {size} | {play_s:.1f} s | {start_s:.1f} s | {solved} | {load:.2f} |")
    if args.no_write:
        return
    name = args.model or "the embedded SmolLM2-135M-Instruct"
    body = "\n".join([
        f"`python benchmarks/vllm_batch.py{' ' + args.model if args.model else ''} --sizes "
        f"{' '.join(map(str, args.sizes))}`: {name} plays {args.episodes} greedy test-split "
        "calendars (4 turns, 64 tokens a turn, every episode in flight) on a fresh float32 "
        "engine per `max_num_seqs` (`model.max_batch_size`), one after the other.",
        "",
        "| max_num_seqs | episodes | engine start | solved | load average before |",
        "|---:|---:|---:|---:|---:|",
        *rows, "", machine_line(first_load)])
    write_section("vLLM's batch on the calendar evaluation", body)


if __name__ == "__main__":
    main()
