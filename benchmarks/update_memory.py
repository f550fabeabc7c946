"""The update with and without shared-prefix packing: tokens, time, FLOP/s and peak memory.

One PPO-clip update (``ppo_update``: micro-batches, accumulation, AdamW step) of
SmolLM2-135M-Instruct on samples shaped like this library's rollouts, run twice per case,
``optim.pack_prefixes`` off then on, each in a fresh process so that its peak resident
memory is its own:

- ``groups``: 2 tasks × a group of 4, every prompt a shared 518-token system prompt and
  tools + a 60-token task, 96-token completions (the quickstart's shape);
- ``history``: one full-history episode of 5 turns (each prompt is the previous turn's
  sequence + a 60-token observation, 40-token actions);
- ``shared``: the credit study's window-context batch, 16 samples of different tasks of one
  env after one shared 300-token instruction prompt, each with its own 200-token rest (its
  board, the last action and observation) and a 4-token action: packing runs the prompt once
  and the rests as a padded batch instead of a prefix tree with a dense N × N mask;
- ``unshared``: packing's worst case, 16 samples with nothing in common (200-token prompts,
  56-token completions) that fill one 4096-token micro-batch: packing runs no fewer tokens
  and pays for an N × N attention mask.

Achieved FLOP/s counts 6 × (non-embedding parameters) per forwarded token plus 6 × d × V per
scored token (the output layer runs only where log-probs are needed); attention's quadratic
term is left out. It is set against this CPU's float32 matmul peak, measured in the same run
(in each update's process, just before it).

    python benchmarks/update_memory.py [--no-write]
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

SYSTEM, TASK, COMPLETION = 518, 60, 96
TURNS, ACTION, OBSERVATION = 5, 40, 60
UNSHARED, UNSHARED_PROMPT, UNSHARED_COMPLETION = 16, 200, 56
SHARED, SHARED_PROMPT, SHARED_REST, SHARED_ACTION = 16, 300, 200, 4
TITLE = "Update: shared-prefix packing and memory (cpu)"


def samples(case: str, vocab: int) -> list:
    """The synthetic samples of ``case`` (token ids drawn from the model's vocabulary)."""
    from agentgym.trainers.batching import Sample

    rng = np.random.default_rng(0)

    def ids(n: int) -> list[int]:
        return [int(x) for x in rng.integers(100, vocab, n)]

    system, out = ids(SYSTEM), []
    if case == "unshared":
        for i in range(UNSHARED):
            prompt = ids(UNSHARED_PROMPT)
            out.append(Sample(f"u{i}", f"u{i}", 0, tuple(prompt + ids(UNSHARED_COMPLETION)),
                              len(prompt), float(rng.normal()), (-1.0,) * UNSHARED_COMPLETION))
        return out
    if case == "shared":
        prompt = ids(SHARED_PROMPT)
        for i in range(SHARED):
            rest = ids(SHARED_REST)
            out.append(Sample(f"s{i}", f"s{i}", 0, tuple(prompt + rest + ids(SHARED_ACTION)),
                              SHARED_PROMPT + SHARED_REST, float(rng.normal()),
                              (-1.0,) * SHARED_ACTION))
        return out
    if case == "groups":
        for task in range(2):
            prompt = system + ids(TASK)
            for i in range(4):
                out.append(Sample(f"t{task}-{i}", f"g{task}", 0, tuple(prompt + ids(COMPLETION)),
                                  len(prompt), float(rng.normal()), (-1.0,) * COMPLETION))
        return out
    context = system
    for t in range(TURNS):
        action = ids(ACTION)
        out.append(Sample("e", "g", t, tuple(context + action), len(context),
                          float(rng.normal()), (-1.0,) * ACTION))
        context = context + action + ids(OBSERVATION)
    return out


def run_one(case: str, pack: bool, tree_only: bool = False) -> dict[str, float]:
    """One update in this process; its figures (``peak_rss_mb`` is this process's peak)."""
    from agentgym.policies.models import load_model
    from agentgym.trainers import loss

    loss.BATCH_SHARED_PREFIX = not tree_only
    from agentgym.trainers.batching import micro_batches
    from agentgym.trainers.config import LossConfig, OptimConfig
    from agentgym.trainers.packing import pack_prefix_tree
    from agentgym.trainers.update import Learner, UpdateConfig, ppo_update

    model, tokenizer = load_model("smollm2")
    batch = samples(case, model.config.vocab_size)
    optim = OptimConfig(lr=1e-6, pack_prefixes=pack)
    mbs = micro_batches(batch, optim.max_tokens_per_micro_batch, tokenizer.pad_token_id,
                        pack=pack)
    forwarded = sum(len(pack_prefix_tree([batch[i].input_ids for i in mb.sample_indices]).tokens)
                    if pack else mb.input_ids.numel() for mb in mbs)
    scored = sum(s.num_completion_tokens for s in batch)
    learner = Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-6), None,
                      torch.device("cpu"), tokenizer.pad_token_id)
    config = UpdateConfig(optim, LossConfig(), temperature=1.0, seed=0)
    peak = matmul_peak(seconds=2.0)  # right before, under the same load as the update
    start = time.perf_counter()
    ppo_update(learner, batch, config, step=1)
    seconds = time.perf_counter() - start
    d, vocab = model.config.hidden_size, model.config.vocab_size
    body = sum(p.numel() for p in model.parameters()) - vocab * d  # tied output layer
    flops = 6 * body * forwarded + 6 * d * vocab * scored
    return {"forwarded": forwarded, "scored": scored, "micro_batches": len(mbs),
            "seconds": seconds, "flops": flops, "peak": peak,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def render(rows: list[dict], peak: float, cpu: str, cores: int | None,
           load: tuple[float, float, float]) -> str:
    """The docs section: the setup, the machine and its measured peak, one row per update."""
    table = ["| case | packing | tokens forwarded | trained tokens | micro-batches | update s "
             "| trained tokens/s | forwarded tokens/s | GFLOP/s | matmul peak GFLOP/s | of peak "
             "| peak RSS MB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        achieved = r["flops"] / r["seconds"]
        table.append(f"| {r['case']} | {r['pack']} | {r['forwarded']} | {r['scored']} | "
                     f"{r['micro_batches']} | {r['seconds']:.1f} | "
                     f"{r['scored'] / r['seconds']:.1f} | {r['forwarded'] / r['seconds']:.1f} | "
                     f"{achieved / 1e9:.1f} | {r['peak'] / 1e9:.1f} | {achieved / r['peak']:.0%} | "
                     f"{r['peak_rss_mb']:.0f} |")
    body = "\n".join([
        "One PPO-clip update (`ppo_update`, AdamW step included, micro-batches of 4096 "
        "tokens) of SmolLM2-135M-Instruct, float32, with `optim.pack_prefixes` off and on, "
        "each in a fresh process (peak RSS is that process's, model load included). "
        f"`groups`: 2 tasks × 4 completions of {COMPLETION} tokens after a shared "
        f"{SYSTEM}-token system prompt + a {TASK}-token task (the quickstart's shape). "
        f"`history`: one full-history episode of {TURNS} turns ({ACTION}-token actions, "
        f"{OBSERVATION}-token observations). `shared`: the credit study's window-context "
        f"batch, {SHARED} samples of different tasks after one shared {SHARED_PROMPT}-token "
        f"instruction prompt, each with its own {SHARED_REST}-token rest and a "
        f"{SHARED_ACTION}-token action. Packing picks per micro-batch whichever costs less: "
        "the prefix tree with a dense N × N attention mask (`groups`, `history`), or the "
        "shared prompt run once with its keys and values repeated for a padded batch of the "
        "rests (`shared`; its `tree` row forces the tree). `unshared`: packing's worst "
        f"case, {UNSHARED} samples with nothing in common ({UNSHARED_PROMPT}-token prompts, "
        f"{UNSHARED_COMPLETION}-token completions) in one "
        f"{UNSHARED * (UNSHARED_PROMPT + UNSHARED_COMPLETION)}-token micro-batch. "
        "One timed update per row. GFLOP/s counts 6 × "
        "non-embedding parameters per forwarded token + 6 × d × V per trained token "
        "(attention's quadratic term left out).",
        "",
        f"Machine: {cpu}, {cores} cores, torch {torch.__version__}, Python "
        f"{platform.python_version()}; float32 matmul peak measured in the same run: "
        f"{peak / 1e9:.1f} GFLOP/s at its start, and again in each row's process just before "
        "its update (the column the row is set against). Load average (1, 5, 15 min) "
        f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} at the end of the run, this run's own "
        "work included; the token counts are exact.",
        "Command: `python benchmarks/update_memory.py`",
        "",
        *table,
    ])
    return body


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--one", nargs=2, metavar=("CASE", "PACK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one update, figures as JSON on the last line
        print(json.dumps(run_one(args.one[0], args.one[1] != "off", args.one[1] == "tree")))
        return
    peak = matmul_peak(seconds=3.0)
    cpu, cores = cpu_model(), os.cpu_count()
    print(f"{cpu}, {cores} cores, torch {torch.__version__}; "
          f"float32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    rows = []
    for case in ("groups", "history", "shared", "unshared"):
        for pack in ("off", "tree", "on") if case == "shared" else ("off", "on"):
            proc = subprocess.run([sys.executable, __file__, "--one", case, pack],
                                  capture_output=True, text=True, check=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r.update(case=case, pack=pack)
            rows.append(r)
            print(f"{case:8} packing {pack:3}: {r['forwarded']:6d} tokens forwarded, "
                  f"{r['seconds']:6.1f} s, {r['scored'] / r['seconds']:5.1f} trained tokens/s, "
                  f"{r['forwarded'] / r['seconds']:6.1f} forwarded tokens/s, "
                  f"{r['flops'] / r['seconds'] / 1e9:5.1f} GFLOP/s "
                  f"({r['flops'] / r['seconds'] / r['peak']:.0%} of "
                  f"{r['peak'] / 1e9:.1f}), "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}")
    if not args.no_write:
        write_section(TITLE, render(rows, peak, cpu, cores, load))


if __name__ == "__main__":
    main()
