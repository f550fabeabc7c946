"""vLLM's CPU build against agentgym's transformers backend, side by side in one run.

Measures, on the embedded SmolLM2-135M-Instruct (float32) and the same prompts (64
times-table chat requests, at most 64 tokens, T = 1, a seed each):

1. generation: raw vLLM (``LLM.generate`` on the prompt ids), agentgym on vLLM
   (``VLLMPolicy.generate``) and agentgym's transformers backend: completion tokens/s, and
   the peak resident memory of this process and its children (the engine's processes);
2. engine start: eager, compiled with an empty compile cache (cold), compiled again (cached);
3. a training step's split (generation / update / weight sync, from the run's metrics) per
   backend, for the times-table job (MentalMath, single turn) and a multi-turn env
   (Sokoban, window context), with each run's wall time and peak memory;
4. the BFCL sample eval (benchmarks/bfcl_sample_single.yaml) wall time per backend.

Writes the section "vLLM (CPU build) vs transformers" of docs/benchmarks.md. Run it on an
idle machine (the load average is recorded beside the figures):

    python benchmarks/vllm_generation.py [--skip-train] [--skip-bfcl] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import PeakMemory, cpu_model, machine_line, write_section

ROOT = Path(__file__).resolve().parent.parent
TITLE = "vLLM (CPU build) vs transformers"
MAX_TOKENS = 64


def requests():
    from agentgym import Message
    from agentgym.policies.base import GenerationRequest, SamplingParams

    return [GenerationRequest((Message("user", f"What is {2 + i % 11} * {3 + i // 11}? "
                                                "Answer with just the number."),),
                              params=SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS,
                                                    seed=i)) for i in range(64)]


def engine_settings() -> dict:
    """What VLLMPolicy gives its engine on a CPU (so raw vLLM runs the same engine)."""
    return {"dtype": "float32", "max_model_len": 4096, "seed": 0, "max_num_seqs": 64,
            "enable_prefix_caching": True, "kv_cache_memory_bytes": 2**30,
            "enable_chunked_prefill": False, "max_num_batched_tokens": 8192}


def raw_vllm(folder: str, prompt_ids: list[list[int]], eager: bool = True) -> dict:
    from vllm import LLM, SamplingParams

    with PeakMemory() as memory:
        start = time.perf_counter()
        llm = LLM(model=folder, enforce_eager=eager, **engine_settings())
        started = time.perf_counter() - start
        params = [SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=i, logprobs=0)
                  for i in range(len(prompt_ids))]
        start = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params,
                            use_tqdm=False)
        wall = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        llm.llm_engine.engine_core.shutdown()
        del llm
    return {"start_s": started, "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
            "peak_mb": memory.mb}


async def agentgym_backend(kind: str, folder: str) -> tuple[dict, list[list[int]]]:
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.policies.vllm import VLLMPolicy

    with PeakMemory() as memory:
        start = time.perf_counter()
        policy = VLLMPolicy(folder) if kind == "vllm" else TransformersPolicy.load(folder)
        started = time.perf_counter() - start
        reqs = requests()
        await policy.generate(reqs[:1])  # first call: lazy set-up on both sides
        start = time.perf_counter()
        out = await policy.generate(reqs)
        wall = time.perf_counter() - start
        await policy.aclose()
    tokens = sum(len(c.completion_ids) for c in out)
    return ({"start_s": started, "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
             "peak_mb": memory.mb}, [list(c.prompt_ids) for c in out])


def compiled_starts(folder: str) -> dict:
    """Compiled engine start with an empty compile cache, then with the cache it left."""
    cache = tempfile.mkdtemp(prefix="vllm-cache-")
    code = ("import time, sys; from vllm import LLM; t = time.perf_counter(); "
            f"llm = LLM(model={folder!r}, enforce_eager=False, **{engine_settings()!r}); "
            "print('START', time.perf_counter() - t, flush=True)")
    out = {}
    try:
        for label in ("cold", "cached"):
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  env={**os.environ, "VLLM_CACHE_ROOT": cache}, timeout=1800)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("START")), None)
            out[label] = float(line.split()[1]) if line else float("nan")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def run_command(argv: list[str]) -> tuple[float, float, Path | None]:
    """Wall seconds and peak MB of a child command (and its children)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    with PeakMemory(proc.pid) as memory:
        _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{err[-3000:]}")
    return time.perf_counter() - start, memory.mb, None


JOBS = {
    "times-table job (MentalMath, 1 turn)": ["examples/quickstart.yaml", "steps=4",
                                             "save_every=4", "env.eval_seeds=16"],
    "Sokoban (8 turns, window K=1)": ["examples/train_sokoban.yaml", "model.path=smollm2",
                                      "steps=3", "save_every=3", "env.eval_seeds=4",
                                      "algorithm.estimator=grpo"],
}


def train_split(job: list[str], backend: str, run_dir: Path) -> dict:
    argv = [sys.executable, "-m", "agentgym.cli", "train", *job, f"run_dir={run_dir}",
            f"model.generation={backend}"]
    wall, peak, _ = run_command(argv)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout_s" in r][1:] or [r for r in rows if "rollout_s" in r]

    def mean(key: str) -> float:
        return sum(r.get(key, 0.0) for r in steps) / len(steps)
    update = mean("update_s") - mean("sync_s")  # update_s spans the update and the sync
    return {"wall_s": wall, "peak_mb": peak, "rollout_s": mean("rollout_s"),
            "update_s": update, "sync_s": mean("sync_s")}


def bfcl_eval(policy: str, out: Path) -> float:
    wall, _, _ = run_command([sys.executable, "-m", "agentgym.cli", "eval",
                              "--suite", "benchmarks/bfcl_sample_single.yaml", "--policy", policy,
                              "--out", str(out)])
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-bfcl", action="store_true")
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from agentgym.policies.models import embedded_model_dir

    load = os.getloadavg()[0]
    # raw vLLM runs the engine VLLMPolicy starts: no core reserved for the front end
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    folder = str(embedded_model_dir())
    ours_vllm, prompt_ids = asyncio.run(agentgym_backend("vllm", folder))
    raw = raw_vllm(folder, prompt_ids)
    ours_hf, _ = asyncio.run(agentgym_backend("transformers", folder))
    rows = [("raw vLLM (`LLM.generate`, eager)", raw), ("agentgym on vLLM (`VLLMPolicy`)",
                                                        ours_vllm),
            ("agentgym transformers backend", ours_hf)]
    body = [f"`python benchmarks/vllm_generation.py`: SmolLM2-135M-Instruct in float32, 64 "
            f"times-table chat prompts, at most {MAX_TOKENS} tokens, T=1, a seed each; vLLM "
            "0.32.0 (`vllm-cpu`), eager unless said. Load average "
            f"{load:.1f} at the start; {cpu_model()}.", "",
            "| generation | engine start | wall | completion tokens | tokens/s | peak RSS |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        body.append(f"| {name} | {r['start_s']:.1f} s | {r['wall_s']:.1f} s | {r['tokens']} | "
                    f"{r['tok_s']:.0f} | {r['peak_mb']:.0f} MB |")
    body += ["", f"agentgym on vLLM reaches {ours_vllm['tok_s'] / raw['tok_s']:.0%} of raw "
             f"vLLM's throughput and {ours_vllm['tok_s'] / ours_hf['tok_s']:.1f}x the "
             "transformers backend's. Peak RSS sums this process and the engine's."]
    print("\n".join(body), flush=True)
    if not args.skip_compile:
        starts = compiled_starts(folder)
        body += ["", f"Engine start: eager {ours_vllm['start_s']:.0f} s; compiled "
                 f"(torch.compile) {starts['cold']:.0f} s with an empty compile cache, "
                 f"{starts['cached']:.0f} s with the cache it left (`VLLM_CACHE_ROOT`)."]
        print(body[-1], flush=True)
    if not args.skip_train:
        body += ["", "A training step's split (mean over the steps after the first; `update` "
                 "excludes the sync; wall and peak RSS of the whole run, its engine "
                 "processes included):", "",
                 "| job | generation | steps | wall | peak RSS | generation s/step | "
                 "update s/step | sync s/step |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        with tempfile.TemporaryDirectory() as tmp:
            for name, job in JOBS.items():
                for backend in ("transformers", "vllm"):
                    r = train_split(job, backend, Path(tmp) / f"{backend}-{len(body)}")
                    steps = next(x.split("=")[1] for x in job if x.startswith("steps="))
                    body.append(f"| {name} | {backend} | {steps} | {r['wall_s']:.0f} s | "
                                f"{r['peak_mb']:.0f} MB | {r['rollout_s']:.1f} | "
                                f"{r['update_s']:.1f} | {r['sync_s']:.2f} |")
                    print(body[-1], flush=True)
    if not args.skip_bfcl:
        with tempfile.TemporaryDirectory() as tmp:
            hf = bfcl_eval("smollm2", Path(tmp) / "hf")
            vl = bfcl_eval("vllm:smollm2", Path(tmp) / "vllm")
        body += ["", f"BFCL sample eval (`agentgym eval --suite benchmarks/bfcl_sample_single.yaml "
                 f"--policy ...`, its fixed sample): transformers {hf:.0f} s, vLLM {vl:.0f} s "
                 "(engine start included)."]
        print(body[-1], flush=True)
    body += ["", machine_line(load)]
    if not args.no_write:
        write_section(TITLE, "\n".join(body))


if __name__ == "__main__":
    main()
