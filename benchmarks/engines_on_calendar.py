"""vLLM's engine against llama.cpp's server on the agent job's held-out evaluation.

Each backend plays the same greedy held-out calendar episodes (`agentgym rollout
agentgym/Calendar-v0 --policy BACKEND:MODEL ... --temperature 0`, the evaluation the agent
job runs three times) in a command of its own, one after the other; the script records each
command's wall time (engine start included) and the peak of its processes' summed resident
sets (sampled every 0.1 s), and how many tasks the two scored alike. Writes the section
"Engines on the calendar evaluation" of docs/benchmarks.md.

    python benchmarks/engines_on_calendar.py --model runs/agent_job_amx_f32/sft/model

llama.cpp's server must be built first (`bash scripts/build_llama_server.sh`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import PeakMemory, machine_note, write_section  # noqa: E402


def play(backend: str, model: str, episodes: int, out: Path) -> dict[str, float]:
    """One backend's held-out episodes: wall, peak, success and each task's outcome."""
    command = ["agentgym", "rollout", "agentgym/Calendar-v0", "--policy", f"{backend}:{model}",
               "--episodes", str(episodes), "--seed", "1000000", "--kw", "split=test",
               "--kw", "max_turns=4", "--temperature", "0", "--max-tokens", "64",
               "--out", str(out)]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    with PeakMemory(process.pid) as memory:
        code = process.wait()
    if code:
        raise SystemExit(f"{' '.join(command)} exited with {code}")
    trajectories = [json.loads(line) for line in out.read_text().splitlines()]
    return {"wall": time.perf_counter() - start, "peak": memory.peak / 1e9,
            "success": sum(t["outcome_reward"] >= 1 for t in trajectories) / len(trajectories),
            "errors": sum(t["status"] == "error" for t in trajectories),
            "outcomes": {t["seed"]: t["outcome_reward"] for t in trajectories}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2", help="a model folder (or smollm2)")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    load = os.getloadavg()
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for backend in ("vllm", "llamacpp"):
            rows[backend] = play(backend, args.model, args.episodes,
                                 Path(folder, f"{backend}.jsonl"))
            print(backend, {k: v for k, v in rows[backend].items() if k != "outcomes"})
    a, b = rows["vllm"]["outcomes"], rows["llamacpp"]["outcomes"]
    alike = sum(a[seed] == b.get(seed) for seed in a)
    lines = [f"`python benchmarks/engines_on_calendar.py --model {args.model}`: "
             f"{args.episodes} greedy held-out episodes of `agentgym/Calendar-v0` (at most 4 "
             "turns of 64 tokens), float32 weights, each backend at its defaults (vLLM: 64 "
             "sequences, a 1 GiB KV cache, prefix caching; llama.cpp: 16 slots of 2,048 "
             "tokens); wall includes the engine's start, peak is the command's processes' "
             "summed resident sets.", "",
             "| backend | wall | peak memory | held-out success | errors |",
             "|---|---:|---:|---:|---:|"]
    for backend, row in rows.items():
        lines.append(f"| {backend} | {row['wall']:.0f} s | {row['peak']:.2f} GB | "
                     f"{100 * row['success']:.1f}% | {row['errors']} |")
    lines += ["", f"The two scored {alike} of {len(a)} tasks alike.", "",
              machine_note(load)]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("Engines on the calendar evaluation", body)


if __name__ == "__main__":
    main()
