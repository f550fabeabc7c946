"""The training loop end to end on a tiny random model saved as a local checkpoint folder."""

import json

import pytest
import torch
from safetensors.torch import load_file

from agentgym.errors import ConfigError
from agentgym.trainers.config import TrainConfig, from_dict, load_config
from agentgym.trainers.loop import build, train


@pytest.fixture
def tiny_dir(tiny_model_dir):
    return tiny_model_dir


def config(tmp_path, tiny_dir, **over):
    data = {
        "run_dir": str(tmp_path / "run"), "steps": 2, "save_every": 1, "tensorboard": False,
        "resumable_checkpoints": True,
        "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        "optim": {"lr": 1e-3},
    }
    for key, value in over.items():
        section, _, leaf = key.partition("__")
        if leaf:
            data.setdefault(section, {})[leaf] = value
        else:
            data[section] = value
    return from_dict(TrainConfig, data)


def params_of(run_dir, step):
    return load_file(run_dir / "checkpoints" / f"step-{step:06d}" / "model.safetensors")


def test_two_updates_move_every_parameter(tmp_path, tiny_dir):
    cfg = config(tmp_path, tiny_dir)
    before = {n: p.clone() for n, p in build(cfg).model.named_parameters()}
    import shutil

    shutil.rmtree(cfg.run_dir)
    run = train(cfg)
    after = params_of(run, 2)
    assert set(after) == set(before)
    unchanged = [n for n, p in after.items() if torch.equal(p, before[n])]
    assert unchanged == []
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(torch.isfinite(torch.tensor(r[k])) for k in ("loss", "grad_norm"))
        assert r["samples"] > 0 and r["policy_version"] == r["step"]
    assert (run / "config.yaml").exists()


def test_resume_continues_exactly(tmp_path, tiny_dir, one_thread):
    straight = train(config(tmp_path / "a", tiny_dir, steps=4))
    first = config(tmp_path / "b", tiny_dir, steps=2)
    train(first)
    resumed = train(config(tmp_path / "b", tiny_dir, steps=4), resume=True)
    a, b = params_of(straight, 4), params_of(resumed, 4)
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name


def test_checkpoints_leave_out_the_optimizer_unless_resumable(tmp_path, tiny_dir):
    lean = config(tmp_path / "lean", tiny_dir, steps=1, resumable_checkpoints=False)
    folder = train(lean) / "checkpoints" / "step-000001"
    assert (folder / "model.safetensors").exists() and (folder / "state.json").exists()
    assert not (folder / "optimizer.pt").exists()
    with pytest.raises(ConfigError, match="resumable_checkpoints=true"):
        build(config(tmp_path / "lean", tiny_dir, steps=2, resumable_checkpoints=False),
              resume=True)
    full = train(config(tmp_path / "full", tiny_dir, steps=1)) / "checkpoints" / "step-000001"
    moments = torch.load(full / "optimizer.pt", weights_only=False)["state"]
    assert moments and all("exp_avg_sq" in m for m in moments.values())


def test_lora_trains_only_adapters(tmp_path, tiny_dir):
    cfg = config(tmp_path, tiny_dir, model={"path": str(tiny_dir), "lora": {"enabled": True,
                                                                              "r": 4}})
    run = train(cfg)
    saved = params_of(run, 2)
    assert saved and all("lora_" in name for name in saved)


def test_existing_run_needs_resume_and_missing_run_cannot_resume(tmp_path, tiny_dir):
    cfg = config(tmp_path, tiny_dir, steps=1)
    with pytest.raises(ConfigError, match="no checkpoint"):
        build(cfg, resume=True)
    train(cfg)
    with pytest.raises(ConfigError, match="--resume"):
        build(cfg)


async def test_held_out_evaluation_uses_eval_kwargs(tmp_path, tiny_dir):
    from agentgym.trainers.collect import collect

    t = build(config(tmp_path, tiny_dir, env={
        "id": "agentgym/Arithmetic-v0", "kwargs": {"split": "train"}, "max_turns": 1,
        "eval_kwargs": {"split": "test"}}))
    train_ids = {x.task_id for x in await collect(t.config, t.policy, range(2), 1, 1.0, seed=0)}
    eval_ids = {x.task_id for x in await collect(t.config, t.policy, range(2), 1, 0.0, seed=0,
                                                 evaluation=True)}
    assert train_ids == {"arithmetic-train-0", "arithmetic-train-1"}
    assert eval_ids == {"arithmetic-test-0", "arithmetic-test-1"}
    with pytest.raises(ConfigError, match="split must be one of"):  # at build, not mid-run
        build(config(tmp_path / "bad", tiny_dir, env={
            "id": "agentgym/Arithmetic-v0", "eval_kwargs": {"split": "dev"}}))


def test_config_errors_name_the_fix(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lrr: 0.1\n")
    with pytest.raises(ConfigError, match="did you mean 'lr'"):
        load_config(path)
    with pytest.raises(ConfigError, match="rollout.group_size must be >= 2"):
        load_config(None, ["rollout.group_size=1"])
    with pytest.raises(ConfigError, match="optim.lr must be float"):
        load_config(None, ["optim.lr=fast"])
    with pytest.raises(ConfigError, match="must be one of"):
        load_config(None, ["loss.aggregation=sum"])
    with pytest.raises(ConfigError, match="save_every must be >= 1"):  # was a ZeroDivisionError
        load_config(None, ["save_every=0"])
    assert load_config(None, ["optim.lr=3e-6", "env.kwargs={size: 7}"]).env.kwargs == {"size": 7}


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_parameters(tmp_path, tiny_dir, one_thread):
    """SIGKILL a real `agentgym train` after a checkpoint; resuming matches a straight run."""
    import signal
    import subprocess
    import sys
    import time

    straight = train(config(tmp_path / "a", tiny_dir, steps=4))
    cfg_path = tmp_path / "b.yaml"
    from agentgym.trainers.config import save_config

    save_config(config(tmp_path / "b", tiny_dir, steps=4), cfg_path)
    proc = subprocess.Popen([sys.executable, "-m", "agentgym.cli", "train", str(cfg_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=one_thread)
    first = tmp_path / "b" / "run" / "checkpoints" / "step-000001" / "state.json"
    deadline = time.time() + 600  # a bound on a hang: minutes only on a loaded machine
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists(), "the run wrote no checkpoint to resume from"
    resumed = train(config(tmp_path / "b", tiny_dir, steps=4), resume=True)
    a, b = params_of(straight, 4), params_of(resumed, 4)
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name


def test_logging_rollouts_keeps_each_steps_trajectories(tmp_path, tiny_dir):
    """``logging.rollouts``: each step's episodes in ``rollouts/step-NNNNNN.jsonl``, readable
    as trajectories, as many as the step trained on, token ids included; off by default."""
    from agentgym.jsonl import read_trajectories

    run = train(config(tmp_path, tiny_dir, logging={"rollouts": True}))
    files = sorted((run / "rollouts").iterdir())
    assert [f.name for f in files] == ["step-000001.jsonl", "step-000002.jsonl"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for path, row in zip(files, rows, strict=True):
        trajs = list(read_trajectories(path))
        assert len(trajs) == 4  # 2 tasks x 2 rollouts
        assert sum(t.outcome_reward or 0.0 for t in trajs) / 4 == pytest.approx(row["reward_mean"])
        assert all(s.tokens is not None for t in trajs for s in t.steps)
    # a resumed run goes on with the next step's file and leaves the earlier ones
    kept = [f.read_bytes() for f in files]
    again = train(config(tmp_path, tiny_dir, steps=3, logging={"rollouts": True}), resume=True)
    assert len(list(read_trajectories(again / "rollouts" / "step-000003.jsonl"))) == 4
    assert [f.read_bytes() for f in files] == kept
    assert not (train(config(tmp_path / "off", tiny_dir)) / "rollouts").exists()
