#!/usr/bin/env bash
# SmolLM2-135M-Instruct learns function calling from tasks agentgym generates
# (agentgym/FunctionCalls-v0, never BFCL's data), then BFCL scores it with its own checker:
#   1. expert demonstrations   runs/function_calls_expert.jsonl
#   2. LoRA warm start (SFT)   runs/sft_function_calls/model
#   3. GRPO on generated tasks runs/function_calls (held-out success before/after printed)
#   4. merged RL model         runs/function_calls_model
#   5. BFCL evaluation of the base model, the warm start and the RL model, leaderboard tables
# Resumable: a stage whose output exists is skipped, training resumes from its latest
# checkpoint and evaluation from the episodes it recorded. Each stage's wall time, the machine
# and the load average go to runs/bfcl_recipe.tsv.
#   bash benchmarks/bfcl_recipe.sh                  # BFCL's fixed sample (212 entries)
#   SUITE=benchmarks/bfcl_nonlive.yaml bash benchmarks/bfcl_recipe.sh   # every non-live entry
#   SUITE=benchmarks/bfcl_live_ast.yaml bash benchmarks/bfcl_recipe.sh  # every live AST entry
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=${SUITE:-benchmarks/bfcl_sample_single.yaml}
TAG=$(basename "$SUITE" .yaml)
TIMES=runs/bfcl_recipe.tsv
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
mkdir -p runs

stage() {  # stage NAME DONE_PATH COMMAND...: run COMMAND unless DONE_PATH exists
    local name=$1 done=$2; shift 2
    if [ -e "$done" ]; then echo "== $name: done ($done)"; return; fi
    echo "== $name: $*"
    local load start
    load=$(cut -d' ' -f1 /proc/loadavg); start=$(date +%s)
    "$@"
    printf '%s\t%s s\t%s, %s cores\tload %s at start\n' "$name" "$(( $(date +%s) - start ))" \
        "$CPU" "$(nproc)" "$load" >> "$TIMES"
}

stage expert runs/function_calls_expert.jsonl \
    agentgym rollout agentgym/FunctionCalls-v0 --policy expert --episodes 2304 --seed 0 \
    --kw split=train --out runs/function_calls_expert.jsonl
# the RL stage's held-out "before" is the warm start's score, so SFT skips its own evaluation
resume() { [ -d "$1/checkpoints" ] && echo --resume || true; }  # go on from a checkpoint
stage sft runs/sft_function_calls/model \
    agentgym sft examples/sft_function_calls.yaml env.eval_seeds=0 $(resume runs/sft_function_calls)
# the RL run is done once its last step's held-out evaluation is written
steps=$(python -c "import yaml; print(yaml.safe_load(open('examples/function_calls.yaml'))['steps'])")
stage rl "runs/function_calls/heldout/step-$steps.json" \
    agentgym train examples/function_calls.yaml $(resume runs/function_calls)
stage export runs/function_calls_model \
    agentgym export runs/function_calls --out runs/function_calls_model --merge
# the base model (smollm2: the embedded SmolLM2-135M-Instruct), the warm start, the RL model
for pair in base:smollm2 sft:runs/sft_function_calls/model rl:runs/function_calls_model; do
    out=runs/eval/$TAG-${pair%%:*}
    stage "eval ${pair%%:*} ($TAG)" "$out/.complete" bash -c "agentgym eval --suite $SUITE \
        --policy vllm:${pair#*:} --temperature 0 --max-tokens 320 --out $out && touch $out/.complete"
    python -m agentgym.envs.bfcl.leaderboard "$out"
done
cat "$TIMES"
