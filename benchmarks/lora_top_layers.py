"""A training pass with LoRA on every layer or on the top k (``model.lora.top_layers``).

One forward and backward pass of SmolLM2-135M-Instruct (30 decoder layers) over a
1024-token sequence, log-probs scored on its last 300 tokens (an episode's actions and
observations after a shared prompt), LoRA r 16 on all seven projections, as the agent
job's passes (``optim.max_tokens_per_micro_batch: 1024``). Each case runs in a fresh
process (so its peak resident memory is its own), under tcmalloc where the system has it
(as the training commands run): one warm-up pass, then the median of three timed passes.
Below the lowest adapted layer nothing trains, so the backward pass stops there and those
layers keep no activations; gradient checkpointing recomputes only the adapted layers.
Writes the table to docs/benchmarks.md.

    python benchmarks/lora_top_layers.py [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from results import write_section

from agentgym.memory import with_tcmalloc

TITLE = "LoRA on the top layers: a training pass (cpu)"
CASES = [(0, True), (0, False), (16, False), (12, False), (8, False), (8, True), (4, False)]
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TOKENS, SCORED = 1024, 300


def one_case(top: int, checkpointed: bool) -> dict[str, float]:
    """Time passes of one case in this process; its peak resident set in GB."""
    import resource

    import torch

    from agentgym.trainers.config import LoraConfig
    from agentgym.trainers.lora import with_lora
    from agentgym.trainers.models import checkpoint_activations, load_trained_model

    torch.manual_seed(0)
    model, _ = load_trained_model("smollm2", device="cpu", dtype="float32")
    model = with_lora(model, LoraConfig(enabled=True, r=16, alpha=32, top_layers=top,
                                        target_modules=TARGETS))
    if checkpointed:
        checkpoint_activations(model)
    model.train()
    ids = torch.randint(0, 49_000, (1, TOKENS))
    times = []
    for _ in range(4):
        start = time.perf_counter()
        logits = model(input_ids=ids).logits[:, -SCORED:]
        logits.log_softmax(-1).mean().backward()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB -> GB
    return {"seconds": statistics.median(times[1:]), "peak_gb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # a child process: TOP,CHECKPOINTED
    args = parser.parse_args()
    if args.case:
        top, checkpointed = args.case.split(",")
        print(json.dumps(one_case(int(top), checkpointed == "1")))
        return
    load = os.getloadavg()
    rows = []
    for top, checkpointed in CASES:
        out = subprocess.run([sys.executable, __file__, "--case", f"{top},{int(checkpointed)}"],
                             env=with_tcmalloc(dict(os.environ)), capture_output=True,
                             text=True, check=True)
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append((top, checkpointed, figures))
        print(top or "all", checkpointed, figures, flush=True)
    base = rows[0][2]["seconds"]
    lines = ["| adapted layers | gradient checkpointing | s a pass | vs every layer, "
             "checkpointed | peak resident |", "|---|---|---|---|---|"]
    for top, checkpointed, f in rows:
        lines.append(f"| {top or 'all 30'} | {'yes' if checkpointed else 'no'} | "
                     f"{f['seconds']:.2f} | {base / f['seconds']:.2f}x | "
                     f"{f['peak_gb']:.2f} GB |")
    body = (f"One forward and backward pass of SmolLM2-135M-Instruct over {TOKENS} tokens "
            f"(log-probs of the last {SCORED}), LoRA r 16 on all seven projections, on every "
            "layer or on the top k (`model.lora.top_layers`), each case in a fresh process "
            "under tcmalloc, the median of three passes after a warm-up (`python "
            "benchmarks/lora_top_layers.py`; load average "
            f"{load[0]:.1f} at the start):\n\n" + "\n".join(lines))
    print(body)
    if not args.no_write:
        write_section(TITLE, body)


if __name__ == "__main__":
    main()
