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


CONFIGS = sorted(p for p in (Path(__file__).parent.parent / "examples").glob("*.yaml")
                 if not p.name.startswith("sft_"))
SFT_CONFIGS = sorted((Path(__file__).parent.parent / "examples").glob("sft_*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_trains_one_step(path, tmp_path, tiny_model_dir):
    """Each example config loads and runs one step (on a tiny model instead of SmolLM2,
    decoding in-process: vLLM generation is tested on a real engine in test_vllm_training)."""
    import yaml

    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train

    several = bool((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("envs"))
    cfg = load_config(path, [f"run_dir={tmp_path / 'run'}", "steps=1", "save_every=1",
                             f"model.path={tiny_model_dir}", "model.generation=transformers",
                             *([] if several else ["env.eval_seeds=2"]),
                             "rollout.tasks_per_step=2", "rollout.group_size=2",
                             "rollout.max_tokens=4", "tensorboard=false"])
    run = train(cfg)
    assert (run / "checkpoints" / "step-000001" / "model.safetensors").exists()


@pytest.mark.parametrize("path", SFT_CONFIGS, ids=lambda p: p.name)
def test_example_sft_config_runs(path, tmp_path, tiny_model_dir):
    """Each SFT example config loads and fine-tunes (a tiny model on a few expert episodes)."""
    import asyncio

    import yaml

    import agentgym
    from agentgym.jsonl import write_trajectories
    from agentgym.policies.simple import ScriptedAgent
    from agentgym.rollout import RolloutConfig, run_groups
    from agentgym.trainers.sft import sft
    from agentgym.trainers.sft_config import load_sft_config

    env = yaml.safe_load(path.read_text())["env"]
    trajs = asyncio.run(run_groups(lambda: agentgym.make(env["id"], **env.get("kwargs", {})),
                                   ScriptedAgent(), range(2), RolloutConfig(), env_id=env["id"]))
    demos = tmp_path / "demos.jsonl"
    write_trajectories(demos, trajs)
    cfg = load_sft_config(path, [f"run_dir={tmp_path / 'run'}", f"model.path={tiny_model_dir}",
                                 "model.generation=transformers",
                                 f"data.paths=[{demos}]", "env.eval_seeds=1",
                                 "tensorboard=false", "export=false"])
    run = sft(cfg)
    assert list((run / "checkpoints").glob("step-*/model.safetensors"))
