"""Tokens an update forwards when its mini-batches keep samples, episodes or groups whole.

Reads recorded rollouts (a trajectory JSONL with token ids, e.g. from ``agentgym rollout
--policy vllm:...``), makes one training sample per step as the trainer does, splits them
into ``--parts`` mini-batches with :func:`agentgym.trainers.batching.mini_batch_parts` by
each ``optim.mini_batch_by`` (over ``--draws`` shuffles), cuts each mini-batch into
micro-batches of ``--max-tokens`` packed tokens as the update does, and counts the tokens
the forward passes run. No model runs: the counts are what the update's compute scales
with. Writes the table to docs/benchmarks.md.

    agentgym rollout agentgym/Calendar-v0 --policy vllm:runs/sft_agent_calendar/model \
        --episodes 32 --group-size 8 --seed 0 --kw split=train --kw max_turns=4 \
        --max-tokens 64 --out runs/calendar_rollouts.jsonl
    python benchmarks/mini_batch_packing.py runs/calendar_rollouts.jsonl \
        [--parts 2] [--max-tokens 1024]
"""

from __future__ import annotations

import argparse

import numpy as np
from results import write_section

from agentgym.jsonl import read_trajectories
from agentgym.trainers.batching import micro_batches, mini_batch_parts, samples_from_groups
from agentgym.trainers.packing import pack_prefix_tree
from agentgym.types import Group

TITLE = "Mini-batches of whole samples, episodes or groups (tokens forwarded)"


def forwarded(samples, parts: list[list[int]], max_tokens: int) -> tuple[int, int]:
    """Packed tokens and micro-batches of an update over these mini-batches."""
    tokens = passes = 0
    for part in parts:
        rows = [samples[i] for i in part]
        for mb in micro_batches(rows, max_tokens, 0, pack=True):
            tokens += len(pack_prefix_tree([rows[i].input_ids for i in mb.sample_indices]).tokens)
            passes += 1
    return tokens, passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trajectories", help="a trajectory JSONL with recorded token ids")
    parser.add_argument("--parts", type=int, default=2, help="optim.mini_batches")
    parser.add_argument("--max-tokens", type=int, default=1024,
                        help="optim.max_tokens_per_micro_batch")
    parser.add_argument("--draws", type=int, default=5, help="shuffles per unit")
    args = parser.parse_args()
    groups = Group.from_trajectories(list(read_trajectories(args.trajectories)))
    ones = {t.id: np.ones(len(t.steps)) for g in groups for t in g.trajectories}
    samples = samples_from_groups(groups, ones)
    raw = sum(s.length for s in samples)
    episodes = sum(len(g.trajectories) for g in groups)
    lines = [f"`{args.trajectories}`: {len(groups)} groups, {episodes} episodes, "
             f"{len(samples)} samples (steps), {raw:,} tokens unpacked; {args.parts} "
             f"mini-batches, micro-batches of {args.max_tokens} packed tokens, "
             f"{args.draws} shuffles each (`python benchmarks/mini_batch_packing.py "
             f"{args.trajectories} --parts {args.parts} --max-tokens {args.max_tokens}`).", "",
             "| optim.mini_batch_by | tokens forwarded (mean, min-max) | micro-batches (mean) "
             "| of `sample`'s tokens |", "|---|---:|---:|---:|"]
    base = None
    for by in ("sample", "episode", "group"):
        counts = [forwarded(samples, mini_batch_parts(samples, args.parts,
                                                      np.random.default_rng(seed), by=by),
                            args.max_tokens) for seed in range(args.draws)]
        tokens = [t for t, _ in counts]
        mean = float(np.mean(tokens))
        base = base or mean
        lines.append(f"| `{by}` | {mean:,.0f} ({min(tokens):,}-{max(tokens):,}) | "
                     f"{np.mean([p for _, p in counts]):.1f} | {mean / base:.2f} |")
    body = "\n".join(lines)
    print(body)
    write_section(TITLE, body)


if __name__ == "__main__":
    main()
