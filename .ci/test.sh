#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, then runs it (all but `gpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# CPU torch first, so the project's torch requirement is already met (no CUDA wheels).
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[dev]'
ruff check .
python -m pytest -m "not gpu" "$@"
