"""Supervised fine-tuning on a tiny random model: the loss falls, checkpoints feed train."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

import agentgym
from agentgym.context import ContextConfig
from agentgym.errors import ConfigError
from agentgym.jsonl import read_trajectories, write_trajectories
from agentgym.policies.hf import TransformersPolicy
from agentgym.policies.models import load_model
from agentgym.policies.simple import ScriptedAgent
from agentgym.rollout import LMAgent, RolloutConfig, run_groups
from agentgym.trainers.config import TrainConfig, from_dict
from agentgym.trainers.loop import build, train
from agentgym.trainers.sft import demonstration_loss, sft
from agentgym.trainers.sft_config import SFTConfig, load_sft_config
from agentgym.trainers.sft_data import demonstration_samples, load_demonstrations

ROOT = Path(__file__).resolve().parents[2]
SOKOBAN = "agentgym/Sokoban-v0"


def expert_file(path: Path, episodes: int = 6) -> Path:
    """``agentgym rollout agentgym/Sokoban-v0 --policy expert`` as a library call."""
    trajs = asyncio.run(run_groups(lambda: agentgym.make(SOKOBAN, max_steps_generation=10),
                                   ScriptedAgent(), range(episodes), RolloutConfig(),
                                   env_id=SOKOBAN))
    write_trajectories(path, trajs)
    return path


def sft_config(tmp_path: Path, model_dir: Path, demos: Path, **over) -> SFTConfig:
    data = {
        "run_dir": str(tmp_path / "sft"), "save_every": 100, "tensorboard": False,
        "resumable_checkpoints": True,
        "env": {"id": SOKOBAN, "kwargs": {"max_steps_generation": 10}, "max_turns": 2,
                "eval_seeds": 2},
        "model": {"path": str(model_dir)},
        "rollout": {"context": "window", "history_length": 1, "max_tokens": 24},
        "data": {"paths": [str(demos)]},
        "optim": {"lr": 3e-3, "epochs": 4, "batch_size": 4},
    }
    for key, value in over.items():
        section, _, leaf = key.partition("__")
        if leaf:
            data.setdefault(section, {})[leaf] = value
        else:
            data[section] = value
    return from_dict(SFTConfig, data)


def rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_sft_lowers_the_demonstration_loss_and_its_checkpoint_trains(tmp_path, tiny_model_dir):
    demos = expert_file(tmp_path / "expert.jsonl")
    cfg = sft_config(tmp_path, tiny_model_dir, demos)
    model, tokenizer = load_model(str(tiny_model_dir))
    trajs, _ = load_demonstrations(cfg.data)
    samples = demonstration_samples(trajs, tokenizer, ContextConfig(mode="window",
                                                                    history_length=1))
    before = demonstration_loss(model, samples, pad_id=tokenizer.pad_token_id)
    run = sft(cfg)
    exported, _ = load_model(str(run / "model"))
    after = demonstration_loss(exported, samples, pad_id=tokenizer.pad_token_id)
    assert after < before - 0.5, (before, after)
    log = rows(run)
    assert "eval/success_rate" in log[0] and "eval/success_rate" in log[-1]
    assert log[0]["data/samples"] == len(samples)
    assert log[-1]["loss"] < log[1]["loss"]
    # The last checkpoint is model.path of a train run: it loads the SFT weights, one step runs.
    (ckpt,) = (run / "checkpoints").glob("step-*")
    rl = from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "rl"), "steps": 1, "tensorboard": False,
        "env": {"id": SOKOBAN, "max_turns": 2}, "model": {"path": str(ckpt)},
        "rollout": {"tasks_per_step": 1, "group_size": 2, "max_tokens": 4}})
    saved = load_file(ckpt / "model.safetensors")
    started = dict(build(rl).model.named_parameters())
    assert all(torch.equal(started[n], v) for n, v in saved.items())
    import shutil

    shutil.rmtree(tmp_path / "rl")
    assert (train(rl) / "checkpoints" / "step-000001").is_dir()


def test_an_sft_with_nothing_to_evaluate_starts_no_engine(tmp_path, tiny_model_dir,
                                                         monkeypatch):
    """``model.generation: vllm`` with ``env.eval_seeds: 0`` trains without a vLLM engine,
    which would only hold memory (gigabytes on a CPU) for evaluations that never run."""
    import agentgym.trainers.vllm_generation as vllm_generation

    def no_engine(config):
        raise AssertionError("an engine was started with nothing to evaluate")

    monkeypatch.setattr(vllm_generation, "vllm_policy", no_engine)
    demos = expert_file(tmp_path / "expert.jsonl", episodes=2)
    cfg = sft_config(tmp_path, tiny_model_dir, demos, optim={"lr": 3e-3, "epochs": 1},
                     env={"id": SOKOBAN, "kwargs": {"max_steps_generation": 10},
                          "max_turns": 2, "eval_seeds": 0},
                     model={"path": str(tiny_model_dir), "generation": "vllm"})
    run = sft(cfg)
    assert (run / "model").is_dir()
    assert not any("eval/success_rate" in row for row in rows(run))


def test_lora_sft_checkpoint_is_merged_into_the_train_model(tmp_path, tiny_model_dir):
    demos = expert_file(tmp_path / "expert.jsonl", episodes=3)
    cfg = sft_config(tmp_path, tiny_model_dir, demos, env__eval_seeds=0, export=False,
                     model={"path": str(tiny_model_dir), "lora": {"enabled": True, "r": 4}},
                     optim={"lr": 1e-2, "epochs": 1, "batch_size": 4})
    run = sft(cfg)
    (ckpt,) = (run / "checkpoints").glob("step-*")
    assert all("lora_" in name for name in load_file(ckpt / "model.safetensors"))
    from agentgym.trainers.models import load_trained_model

    merged, _ = load_trained_model(str(ckpt))
    base, _ = load_model(str(tiny_model_dir))
    names = [n for n, _ in base.named_parameters() if "q_proj" in n]
    assert names and any(not torch.equal(dict(merged.named_parameters())[n],
                                         dict(base.named_parameters())[n]) for n in names)


def test_resume_continues_to_the_same_weights(tmp_path, tiny_model_dir, one_thread):
    demos = expert_file(tmp_path / "expert.jsonl", episodes=3)
    over = {"env__eval_seeds": 0, "export": False, "save_every": 1,
            "optim": {"lr": 1e-2, "epochs": 2, "batch_size": 4}}
    straight = sft(sft_config(tmp_path / "a", tiny_model_dir, demos, **over))
    steps = rows(straight)[-1]["step"]
    cut = sft_config(tmp_path / "b", tiny_model_dir, demos, **over)
    sft(dataclasses.replace(cut, optim=dataclasses.replace(cut.optim, epochs=1)))
    with pytest.raises(ConfigError, match="--resume"):
        sft(cut)
    resumed = sft(cut, resume=True)
    last = f"step-{steps:06d}"
    a = load_file(straight / "checkpoints" / last / "model.safetensors")
    b = load_file(resumed / "checkpoints" / last / "model.safetensors")
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)


def test_replayed_prompts_are_the_rollout_prompts(tmp_path, tiny_model_dir):
    """A rollout's recorded prompts, rebuilt from its messages alone, are the same ids."""
    model, tokenizer = load_model(str(tiny_model_dir))
    context = ContextConfig(mode="window", history_length=2)
    policy = TransformersPolicy(model, tokenizer, seed=0)
    from agentgym.policies.base import SamplingParams

    agent = LMAgent(policy, context, SamplingParams(max_tokens=4, seed=0))
    trajs = asyncio.run(run_groups(lambda: agentgym.make(SOKOBAN, max_turns=3), agent,
                                   range(2), RolloutConfig(), env_id=SOKOBAN))
    asyncio.run(policy.aclose())
    stripped = [dataclasses.replace(t, steps=tuple(dataclasses.replace(s, tokens=None)
                                                   for s in t.steps)) for t in trajs]
    replayed = demonstration_samples(stripped, tokenizer, context, skip_invalid_steps=False)
    recorded = [s.tokens.prompt_ids for t in trajs for s in t.steps]
    assert [s.input_ids[:s.prompt_len] for s in replayed] == recorded


def test_filters_keep_the_successful_episodes(tmp_path, tiny_model_dir):
    demos = expert_file(tmp_path / "expert.jsonl", episodes=2)
    failed = [dataclasses.replace(t, id=t.id + "-f", outcome_reward=-1.0, steps=tuple(
        dataclasses.replace(s, result=dataclasses.replace(s.result, info={"success": False}))
        for s in t.steps)) for t in read_trajectories(demos)]
    mixed = tmp_path / "mixed.jsonl"
    write_trajectories(mixed, [*read_trajectories(demos), *failed])
    base = sft_config(tmp_path, tiny_model_dir, mixed)
    assert len(load_demonstrations(base.data)[0]) == 4
    only = dataclasses.replace(base.data, success_only=True)
    assert len(load_demonstrations(only)[0]) == 2
    assert len(load_demonstrations(dataclasses.replace(base.data, min_reward=0.0))[0]) == 2
    with pytest.raises(ConfigError, match="passes the filters"):
        load_demonstrations(dataclasses.replace(base.data, min_reward=100.0))


def test_actions_longer_than_the_generation_limit_are_refused(tmp_path, tiny_model_dir):
    """Sokoban's solver actions are 22 tokens: at rollout.max_tokens=16 the SFT model would
    be cut off mid-call every time it acts, so the run stops before training and says so."""
    demos = expert_file(tmp_path / "expert.jsonl", episodes=2)
    cfg = sft_config(tmp_path, tiny_model_dir, demos, rollout__max_tokens=16)
    with pytest.raises(ConfigError, match=r"are longer than rollout.max_tokens=16 \(longest: "
                                          r"22 tokens.*set rollout.max_tokens=22 or more"):
        sft(cfg)
    assert not (tmp_path / "sft" / "metrics.jsonl").exists()


def test_cli_sft_runs_and_mistakes_exit_2_before_torch(tmp_path, tiny_model_dir):
    demos = expert_file(tmp_path / "expert.jsonl", episodes=2)
    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump({
        "run_dir": str(tmp_path / "run"), "tensorboard": False,
        "env": {"id": SOKOBAN, "kwargs": {"max_steps_generation": 10}, "max_turns": 2,
                "eval_seeds": 1},
        "model": {"path": str(tiny_model_dir)}, "rollout": {"max_tokens": 24},
        "data": {"paths": [str(demos)]}, "optim": {"epochs": 1, "batch_size": 8}}))
    cli = [sys.executable, "-m", "agentgym.cli", "sft", str(config)]
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "before training: held-out success" in proc.stderr
    assert (tmp_path / "run" / "model" / "config.json").is_file()
    assert load_sft_config(config).data.paths == (str(demos),)
    probe = ("import sys\nsys.argv = ['agentgym', *sys.argv[1:]]\nfrom agentgym.cli import main\n"
             "try:\n    main()\nexcept SystemExit as exc:\n"
             "    print('exit', exc.code, 'torch' in sys.modules)\n")
    for args in (["optim.lrr=1"], ["data.paths=[nowhere.jsonl]"], ["env.id=agentgym/Sokobn-v0"]):
        proc = subprocess.run([sys.executable, "-c", probe, "sft", str(config), *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.stdout.strip().endswith("exit 2 False"), (args, proc.stdout, proc.stderr)
        assert "error:" in proc.stderr


def test_an_sft_run_exports_like_a_train_run(tmp_path, tiny_model_dir):
    """`agentgym export` takes an SFT run folder: its checkpoint, as a model folder that
    transformers loads, with the SFT weights."""
    from transformers import AutoModelForCausalLM

    from agentgym.trainers.export import export_run

    demos = expert_file(tmp_path / "expert.jsonl", episodes=2)
    run = sft(sft_config(tmp_path, tiny_model_dir, demos, optim__epochs=1,
                         env__eval_seeds=0))
    demos.unlink()  # export reads the run's model section only
    done = export_run(run, tmp_path / "out")
    assert done.kind == "model" and done.step >= 1
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    saved = load_file(done.checkpoint / "model.safetensors")
    params = dict(exported.named_parameters())
    assert len(saved.keys() & params.keys()) > len(saved) // 2
    assert all(torch.equal(params[n], v) for n, v in saved.items() if n in params)
    assert (tmp_path / "out" / "agentgym-export.json").is_file()


def test_an_episodes_steps_stay_together_in_every_epoch():
    from agentgym.trainers.sft import batches
    from agentgym.trainers.sft_config import SFTOptimConfig

    episodes = [f"ep{e}" for e in range(9) for _ in range(3)]  # 9 episodes of 3 steps
    plan = batches(episodes, SFTOptimConfig(epochs=2, batch_size=6), seed=0)
    assert [len(b) for b in plan] == [6, 6, 6, 6, 3] * 2  # each epoch cut on its own
    for epoch in (plan[:5], plan[5:]):
        flat = [i for b in epoch for i in b]
        assert sorted(flat) == list(range(27))  # every step once an epoch
        for e in range(9):  # an episode's steps in order, next to each other
            at = flat.index(3 * e)
            assert flat[at:at + 3] == [3 * e, 3 * e + 1, 3 * e + 2]
    assert plan[:4] != plan[5:]  # episodes reshuffled each epoch
