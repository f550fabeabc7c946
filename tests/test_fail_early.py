"""Commands check their config, files and names before they load a model (or import torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import sys
sys.argv = ["agentgym", *sys.argv[1:]]
from agentgym.cli import main
try:
    main()
except SystemExit as exc:
    print("exit", exc.code, "torch loaded" if "torch" in sys.modules else "no torch")
"""


@pytest.mark.parametrize("args", [
    ["train", "examples/quickstart.yaml", "optim.lrr=1"],
    ["train", "examples/no-such-config.yaml"],
    ["eval", "--suite", "no-such-suite", "--policy", "smollm2"],
    ["rollout", "agentgym/Sokobn-v0", "--policy", "smollm2"],
    ["rollout", "agentgym/Sokoban-v0", "--policy", "smollm2", "--kw", "no_such_kwarg=1"],
], ids=["train-typo", "train-missing-file", "eval-unknown-suite", "rollout-unknown-env",
        "rollout-bad-kwarg"])
def test_a_caller_mistake_fails_before_the_model_loads(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.stdout.strip().endswith("exit 2 no torch"), (proc.stdout, proc.stderr[-1500:])
    assert "error:" in proc.stderr
