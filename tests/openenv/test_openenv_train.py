"""``train`` runs on an ``openenv:URL`` env id: the rollouts go through OpenEnv, none errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("openenv")
pytest.importorskip("torch")

from openenv_helpers import served  # noqa: E402

from agentgym.envs.openenv.server import build_app  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_train_steps_on_an_openenv_env(tmp_path, tiny_model_dir):
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train

    with served(build_app("agentgym/MentalMath-v0", {"attempts": 1})) as url:
        cfg = load_config(EXAMPLES / "train_mental_math.yaml", [
            f"run_dir={tmp_path / 'run'}", "steps=1", "save_every=1",
            f"model.path={tiny_model_dir}", f"env.id=openenv:{url}", "env.kwargs={}",
            "env.eval_seeds=2", "rollout.tasks_per_step=2", "rollout.group_size=2",
            "rollout.max_tokens=4", "tensorboard=false"])
        run = train(cfg)
    assert (run / "checkpoints" / "step-000001" / "model.safetensors").exists()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "error_rate" in r]
    assert steps and all(r["error_rate"] == 0.0 for r in steps)
