"""TRL's GRPO trainer trains SmolLM2 on an agentgym env served by ``agentgym openenv serve``.

The server is the real command, in its own process on 127.0.0.1; the example script's
``train`` talks to it only through openenv-core's client. Checked: TRL took its steps, every
reward came from the env (MentalMath scores 0 or 1), and the weights moved exactly when some
group's rewards differed (GRPO's update is zero otherwise).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from process_fixtures import wait_until

pytest.importorskip("openenv")
pytest.importorskip("trl")
pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openenv" / "trl_grpo.py"


def _example():
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_trl_grpo_trains_through_openenv(spawn, tmp_path):
    example = _example()
    kws = [a for k, v in example.ENV_KWARGS.items() for a in ("--kw", f"{k}={v}")]
    server = spawn([sys.executable, "-m", "agentgym.cli", "openenv", "serve", example.ENV_ID,
                    *kws, "--port", "0"])
    found: list[str] = []

    def listening() -> bool:
        found[:] = re.findall(r"at (http://127\.0\.0\.1:\d+)", server.output())
        return bool(found)

    wait_until(listening, "the serving line", server)
    outcome = example.train(found[0], steps=2, out=tmp_path / "run", prompts=4)
    assert outcome.steps == 2
    assert len(outcome.rewards) == 2 * 8  # 2 steps x 2 tasks x 4 completions
    assert set(outcome.rewards) <= {0.0, 1.0}
    # TRL orders completions task by task (4 each): GRPO updates only where a group's
    # rewards differ; where every group scored alike, advantages, loss and update are 0.
    groups = [outcome.rewards[i:i + 4] for i in range(0, len(outcome.rewards), 4)]
    if any(len(set(g)) > 1 for g in groups):
        assert outcome.max_weight_change > 0.0
    else:
        assert outcome.max_weight_change == 0.0
