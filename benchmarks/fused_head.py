"""An update's passes with the output layer fused into the log-softmax, against the logits (CPU).

The passes of ``benchmarks/tree_attention.py`` (recorded rollouts, every sample trained, LoRA
r 16 on the seven projections, gradient checkpointing, prefix-tree attention, the PPO-clip
loss), each configuration in its own process under tcmalloc where the system has it, in turn
for ``--repeats`` rounds: ``logits`` keeps the scored tokens' ``(N, V)`` logits for the
backward pass, ``fused`` runs the output layer inside the chunked log-softmax
(agentgym/trainers/fused_head.py). Peak resident memory is the process's, model load
included.

    python benchmarks/fused_head.py runs/calendar_rollouts.jsonl \
        --model runs/sft_agent_calendar/model [--max-tokens 1024 4096] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tree_attention import one  # noqa: E402

from agentgym.memory import with_tcmalloc  # noqa: E402

TITLE = "Update: the output layer fused into the log-softmax (CPU)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trajectories", help="a trajectory JSONL with recorded token ids")
    parser.add_argument("--model", default="smollm2", help="model folder the rollouts came from")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[1024, 4096],
                        help="optim.max_tokens_per_micro_batch values to run")
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the configurations")
    parser.add_argument("--one", nargs=2, metavar=("SCORING", "MAX_TOKENS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if args.one:
        from agentgym.trainers import fused_head

        fused_head.ENABLED = args.one[0] == "fused"
        print(json.dumps(one(args.trajectories, args.model, "tree", int(args.one[1]))))
        return
    configs = [(s, m) for m in args.max_tokens for s in ("logits", "fused")]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {c: [] for c in configs}
    load = os.getloadavg()[0]
    for _ in range(args.repeats):
        for scoring, max_tokens in configs:
            out = subprocess.run([sys.executable, __file__, args.trajectories, "--model",
                                  args.model, "--one", scoring, str(max_tokens)],
                                 check=True, capture_output=True, text=True,
                                 env=with_tcmalloc(os.environ)).stdout
            result = json.loads(out.strip().splitlines()[-1])
            runs[(scoring, max_tokens)].append(result)
            print(scoring, max_tokens, result, flush=True)
    first = runs[configs[0]][0]
    command = (f"python benchmarks/fused_head.py {args.trajectories} --model {args.model} "
               f"--max-tokens {' '.join(map(str, args.max_tokens))} --repeats {args.repeats}")
    lines = [f"`{args.trajectories}` ({first['samples']} samples), model `{args.model}`, "
             "LoRA r 16 on the seven projections, gradient checkpointing, prefix-tree "
             f"attention, float32, {'tcmalloc' if first['tcmalloc'] else 'glibc malloc'}, "
             f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), load "
             f"average {load:.1f} at the start; median of {args.repeats} rounds, each "
             f"configuration in its own process in turn (`{command}`).", "",
             "| scoring | micro-batch tokens | passes | update passes (s, each round) | "
             "peak resident (each round) |", "|---|---:|---:|---|---|"]
    for scoring, max_tokens in configs:
        rs = runs[(scoring, max_tokens)]
        wall = statistics.median(r["wall_s"] for r in rs)
        each = ", ".join(f"{r['wall_s']:.1f}" for r in rs)
        peaks = ", ".join(f"{r['peak_gb']:.2f}" for r in rs)
        lines.append(f"| {scoring} | {max_tokens} | {rs[0]['passes']:.0f} | {wall:.1f} "
                     f"({each}) | {max(r['peak_gb'] for r in rs):.2f} GB ({peaks}) |")
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        from results import write_section
        write_section(TITLE, body)


if __name__ == "__main__":
    main()
