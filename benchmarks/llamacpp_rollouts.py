"""llama.cpp's server settings on the agent job's rollouts: slots and fused attention.

Plays what one RL step of the agent job plays (4 calendar tasks x 8 rollouts, at most 4 turns
of 64 tokens, temperature 1) on a llama.cpp server, ``--rounds`` times for each setting, each
round on new tasks and an emptied cache (the server stopped first, as after a weight sync).
Records each round's wall and the tokens it sampled. Writes the section "Server settings" of
docs/llamacpp.md.

    python benchmarks/llamacpp_rollouts.py --model runs/agent_job_amx_f32/sft/model

llama.cpp's server must be built first (`bash scripts/build_llama_server.sh`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import agentgym
from agentgym.policies.base import SamplingParams
from agentgym.policies.llamacpp import LlamaCppPolicy
from agentgym.policies.models import embedded_model_dir, is_embedded
from agentgym.rollout import LMAgent, RolloutConfig, run_groups

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine_note, write_section  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "llamacpp.md"
SETTINGS = ((16, True), (16, False), (32, False))  # (slots, fused attention)


async def rounds(model: str, slots: int, flash_attn: bool, count: int) -> list[tuple[float, int]]:
    """Each round's wall and sampled tokens, on one server with these settings."""
    policy = LlamaCppPolicy(model, max_num_seqs=slots, slot_tokens=1024, flash_attn=flash_attn)
    agent = LMAgent(policy, sampling=SamplingParams(max_tokens=64, seed=7))

    def make() -> agentgym.Env:
        return agentgym.make("agentgym/Calendar-v0", split="train", max_turns=4)

    out = []
    try:
        for number in range(count):
            await policy.suspend()  # an empty cache, as after a weight sync
            start = time.perf_counter()
            trajectories = await run_groups(make, agent, range(1000 + 4 * number,
                                                               1004 + 4 * number),
                                            RolloutConfig(group_size=8, concurrency=64))
            wall = time.perf_counter() - start
            tokens = sum(len(s.tokens.completion_ids) for t in trajectories for s in t.steps
                         if s.tokens is not None)
            out.append((wall, tokens))
    finally:
        await policy.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--model", default="smollm2", help="a model folder (or smollm2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    load = os.getloadavg()
    lines = [f"`python benchmarks/llamacpp_rollouts.py --model {args.model}`: one RL step's "
             "rollouts of the agent job (4 `agentgym/Calendar-v0` tasks x 8, at most 4 turns "
             "of 64 tokens, temperature 1), each round on new tasks with the server started "
             "on an empty cache (as after a weight sync); float32 weights, float16 KV cache, "
             "slots of 1,024 tokens.", "",
             "| slots | fused attention | wall per round (mean) | rounds | tokens sampled |",
             "|---:|---|---:|---|---:|"]
    model = str(embedded_model_dir()) if is_embedded(args.model) else args.model
    for slots, flash_attn in SETTINGS:
        measured = asyncio.run(rounds(model, slots, flash_attn, args.rounds))
        walls = [wall for wall, _ in measured]
        print(slots, flash_attn, measured, flush=True)
        lines.append(f"| {slots} | {'on' if flash_attn else 'off'} | "
                     f"{statistics.mean(walls):.1f} s | "
                     f"{', '.join(f'{w:.1f}' for w in walls)} | "
                     f"{sum(t for _, t in measured)} |")
    lines += ["", machine_note(load)]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("Server settings", body, path=DOC)


if __name__ == "__main__":
    main()
