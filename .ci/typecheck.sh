#!/usr/bin/env bash
# pyright in basic mode on the agentgym package (settings: [tool.pyright] in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
pyright "$@"
