"""Every script in examples/ runs to completion."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path):
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


CONFIGS = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_trains_one_step(path, tmp_path, tiny_model_dir):
    """Each example config loads and runs one step (on a tiny model instead of SmolLM2)."""
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train

    import yaml

    several = bool((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("envs"))
    cfg = load_config(path, [f"run_dir={tmp_path / 'run'}", "steps=1", "save_every=1",
                             f"model.path={tiny_model_dir}",
                             *([] if several else ["env.eval_seeds=2"]),
                             "rollout.tasks_per_step=2", "rollout.group_size=2",
                             "rollout.max_tokens=4", "tensorboard=false"])
    run = train(cfg)
    assert (run / "checkpoints" / "step-000001" / "model.safetensors").exists()
