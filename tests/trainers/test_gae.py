"""GAE (Schulman et al. 2016) by hand, and the value head that feeds it."""

import json
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages import get_estimator
from agentgym.trainers.advantages.gae import gae
from agentgym.trainers.config import ValueConfig
from agentgym.trainers.critic import Critic, state_pack
from agentgym.types import Group, Message, Step, StepResult, StepTokens, Trajectory


def test_gae_by_hand():
    # r = [0, 0, 1], V = [0.2, 0.4, 0.6], γ = 0.9, λ = 0.8:
    #   δ_2 = 1 - 0.6 = 0.4;  δ_1 = 0 + 0.9·0.6 - 0.4 = 0.14;  δ_0 = 0 + 0.9·0.4 - 0.2 = 0.16
    #   A_2 = 0.4;  A_1 = 0.14 + 0.72·0.4 = 0.428;  A_0 = 0.16 + 0.72·0.428 = 0.46816
    adv, ret = gae(np.array([0.0, 0.0, 1.0]), np.array([0.2, 0.4, 0.6]), gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [0.46816, 0.428, 0.4], rtol=1e-12)
    np.testing.assert_allclose(ret, [0.66816, 0.828, 1.0], rtol=1e-12)
    r, v = np.array([0.5, -1.0, 2.0]), np.array([0.3, 0.1, -0.2])
    # λ = 1: the return-to-go less V; λ = 0: the one-step TD error
    np.testing.assert_allclose(gae(r, v, 0.9, 1.0)[0], [0.5 - 0.9 + 0.81 * 2 - 0.3,
                                                        -1.0 + 1.8 - 0.1, 2.2], rtol=1e-12)
    np.testing.assert_allclose(gae(r, v, 0.9, 0.0)[0], [0.5 + 0.09 - 0.3, -1.0 - 0.18 - 0.1,
                                                        2.2], rtol=1e-12)


def traj(tid, rewards, values, valid=None, outcome=None, base=1):
    steps = tuple(
        Step(k, Message("assistant", "a"), StepResult((), r, info={} if v is None else
                                                      {"value": v}),
             StepTokens((1, base, 3 + k), (4 + k, 5)), valid=True if valid is None else valid[k])
        for k, (r, v) in enumerate(zip(rewards, values, strict=True)))
    return Trajectory(tid, "task", "g", (), steps, outcome_reward=outcome)


def test_gae_estimator_on_env_rewards_by_hand():
    # a: r = [0, 1], V = [0.5, 0.5], γ = λ = 1 -> δ = [0 + 0.5 - 0.5, 1 - 0.5] -> A = [0.5, 0.5]
    # b: r = [0] but the env reports outcome 2 apart -> r = [2], V = [1] -> A = [1]
    # batch A = [0.5, 0.5, 1.0]: mean 2/3, unbiased std sqrt(1/12)
    groups = [Group("task", (traj("a", [0.0, 1.0], [0.5, 0.5], valid=[True, False]),
                             traj("b", [0.0], [1.0], outcome=2.0)))]
    est = get_estimator("gae", gamma=1.0, lam=1.0, invalid_penalty=0.1)
    np.testing.assert_allclose(est.returns(groups)["b"], [2.0])
    adv = est(groups)
    z = (np.array([0.5, 0.5, 1.0]) - 2 / 3) / (math.sqrt(1 / 12) + 1e-6)
    np.testing.assert_allclose(adv["a"], [z[0], z[1] - 0.1], rtol=1e-9)  # λ on its own step
    np.testing.assert_allclose(adv["b"], [z[2]], rtol=1e-9)
    with pytest.raises(SchemaError, match="value head"):
        est([Group("task", (traj("c", [1.0], [None]),))])
    with pytest.raises(ConfigError, match="lam must be in"):
        get_estimator("gae", lam=1.5)


def tiny():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)).float()


def test_value_head_reads_the_state_and_its_loss_falls_on_a_fixed_batch():
    lm = tiny()
    before = {n: p.clone() for n, p in lm.named_parameters()}
    critic = Critic.from_policy(lm, ValueConfig(lr=3e-3, epochs=1))
    groups = [Group("task", (traj("a", [0.0, 1.0], [None, None], base=10),
                             traj("b", [0.0, 0.0, -1.0], [None, None, None], base=20)))]
    # marks at the last prompt token: V(s_t) cannot see the action
    assert state_pack(groups[0].trajectories[0]).marks == ((0, 2, 0), (1, 2, 1))
    est = get_estimator("gae", gamma=1.0, lam=1.0)  # λ = 1: R̂ is the return, whatever V
    losses = []
    for _ in range(6):  # what the trainer does each step, on the same batch
        annotated = critic.annotate(groups)
        metrics = critic.fit(annotated, est.returns(annotated))
        losses.append(metrics["value/loss_first"])
    # V = 0 at first; R̂: a -> [1, 1], b -> [-1, -1, -1]
    assert losses[0] == pytest.approx(0.5)
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.5 * losses[0]
    assert all(torch.equal(p, before[n]) for n, p in lm.named_parameters())  # policy untouched


def test_training_step_with_the_value_head(tmp_path, tiny_model_dir):
    from agentgym.trainers.config import TrainConfig, from_dict
    from agentgym.trainers.loop import train

    cfg = from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "run"), "steps": 2, "save_every": 2, "tensorboard": False,
        "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        "algorithm": {"estimator": "gae", "value": {"lr": 1e-3}}, "optim": {"lr": 1e-3}})
    run = train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert math.isfinite(r["value/loss"]) and math.isfinite(r["loss"]) and r["samples"] > 0


def test_spa_with_gae_saves_and_resumes_its_value_head(tmp_path, tiny_model_dir):
    from safetensors.torch import load_file, save_file

    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import build, train
    from agentgym.trainers.metrics import read_metrics

    args = [f"run_dir={tmp_path / 'run'}", "save_every=1", f"model.path={tiny_model_dir}",
            "resumable_checkpoints=true", "env.id=agentgym/MentalMath-v0",
            "algorithm.estimator=spa", "algorithm.options.advantage=gae",
            "algorithm.options.gamma=1.0", "algorithm.value.lr=0.01",
            "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_tokens=4",
            "tensorboard=false", "progress.explore_tasks=1"]
    train(load_config(None, ["steps=1", *args]))
    saved = tmp_path / "run" / "critic" / "step-000001"
    assert torch.load(saved / "optimizer.pt", weights_only=False)["state"]
    # a head unlike the fresh (zero) one, to see --resume read it from the checkpoint
    heads = load_file(saved / "head.safetensors")
    save_file({**heads, "weight": torch.full_like(heads["weight"], 0.25)},
              saved / "head.safetensors")
    run = build(load_config(None, ["steps=2", *args]), resume=True)
    [critic] = [x for x in run.hooks.state if isinstance(x, Critic)]
    assert bool((critic.model.head.weight == 0.25).all())
    train(load_config(None, ["steps=2", *args]), resume=True)
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["value/loss"]) for r in rows)


def test_a_non_finite_return_stops_the_critic_before_its_step():
    from agentgym.trainers.finite import NonFiniteError

    lm = tiny()
    critic = Critic.from_policy(lm, ValueConfig(lr=3e-3, epochs=1))
    groups = [Group("task", (traj("a", [0.0, 1.0], [None, None], base=10),))]
    annotated = critic.annotate(groups)
    returns = {k: np.full_like(v, np.nan) for k, v in
               get_estimator("gae", gamma=1.0, lam=1.0).returns(annotated).items()}
    before = {n: p.clone() for n, p in critic.model.named_parameters()}
    with pytest.raises(NonFiniteError, match=r"fitting the value model .GAE's critic.: the "
                                             r"loss is nan.*lower algorithm.value.lr"):
        critic.fit(annotated, returns)
    assert all(torch.equal(p, before[n]) for n, p in critic.model.named_parameters())
