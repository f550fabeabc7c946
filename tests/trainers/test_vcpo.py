"""VCPO: ESS and the learning-rate scale by hand, the off-policy optimal baseline by hand,
exact score-gradient norms, config checks, and an async tiny-model run whose update takes
the ESS-scaled learning rate."""

import math

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.batching import Sample
from agentgym.trainers.vcpo import (
    VCPOConfig,
    baseline_advantages,
    effective_sample_size,
    lr_scale,
    opob_baseline,
    sample_log_weights,
    sample_weights,
    trajectory_weights,
)


def _sample(traj, group, logprobs, adv=0.0, ids=(5, 6, 7, 8)):
    n = len(logprobs)
    return Sample(traj, group, 0, tuple(ids[:2]) + tuple(ids[2:2 + n]), 2, adv, tuple(logprobs))


def test_ess_and_lr_scale_by_hand():
    # Σw = 4, Σw² = 1 + 1 + 4 + 0 = 6: ESS = 16/6, ρ = ESS/4 = 2/3.
    assert effective_sample_size([1.0, 1.0, 2.0, 0.0]) == pytest.approx(16 / 6)
    assert effective_sample_size([1.0] * 5) == pytest.approx(5.0)  # on-policy: ESS = B
    assert effective_sample_size([]) == 0.0
    ratio = 2 / 3
    assert lr_scale(ratio, VCPOConfig(enabled=True)) == pytest.approx(math.sqrt(2 / 3))
    assert lr_scale(ratio, VCPOConfig(enabled=True, lr_scaling="linear")) == pytest.approx(2 / 3)
    assert lr_scale(ratio, VCPOConfig(enabled=True, base_ess_ratio=0.5)) == 1.0
    assert lr_scale(0.25, VCPOConfig(enabled=True, base_ess_ratio=0.5)) == pytest.approx(
        math.sqrt(0.5))
    assert lr_scale(0.1, VCPOConfig(enabled=True, lr_scaling="none")) == 1.0


def test_opob_baseline_by_hand():
    # c = w²‖g‖² = (4·1, 1·4, 1·0) = (4, 4, 0): b* = (4·1 + 4·0 + 0·0) / 8 = 0.5.
    assert opob_baseline([1.0, 0.0, 0.0], [2.0, 1.0, 1.0], [1.0, 4.0, 0.0]) == pytest.approx(0.5)
    # Equal weights and norms: the plain group mean (GRPO's / RLOO's centre).
    assert opob_baseline([1.0, 0.0, 0.0, 1.0], [1.0] * 4, [3.0] * 4) == pytest.approx(0.5)
    assert opob_baseline([1.0, 0.0], [1.0, 1.0], [0.0, 0.0]) == pytest.approx(0.5)


def test_weights_and_baseline_advantages_by_hand():
    samples = [_sample("a", "g", [-1.0, -1.0]), _sample("a", "g", [-2.0]),
               _sample("b", "g", [-1.0]), _sample("c", "h", [-0.5])]
    # Stale: sample 0 (log-ratios +0.5, +0.5) and sample 1 (−1.0); 2 and 3 are fresh.
    proximal = {0: _sample("a", "g", [-0.5, -0.5]), 1: _sample("a", "g", [-3.0])}
    logs = sample_log_weights(samples, proximal)
    assert logs == [(1.0, 2), (-1.0, 1), (0.0, 1), (0.0, 1)]
    assert sample_weights(logs) == pytest.approx([math.exp(0.5), math.exp(-1.0), 1.0, 1.0])
    # Trajectory a: (1.0 − 1.0) / 3 tokens = 0 → w = 1; truncation applies to w_i too.
    assert trajectory_weights(samples, logs, 2.0) == {"a": 1.0, "b": 1.0, "c": 1.0}
    assert trajectory_weights(samples[:1], logs[:1], 1.2)["a"] == pytest.approx(1.2)
    rewards, weights = {"a": 1.0, "b": 0.0, "c": 3.0}, {"a": 2.0, "b": 1.0, "c": 1.0}
    norms = {"a": 1.0, "b": 4.0, "c": 2.0}
    out, metrics = baseline_advantages(samples, rewards, weights, norms)
    # Group g: b* = (4·1·1 + 1·4·0) / (4 + 4) = 0.5; group h alone: b* = 3.
    assert [s.advantage for s in out] == pytest.approx([0.5, 0.5, -0.5, 0.0])
    assert metrics["vcpo/baseline_shift"] == pytest.approx(0.0)  # 0.5 is also g's mean


def test_score_grad_norms_are_exact(tiny_model_dir):
    import torch

    from agentgym.policies.models import load_model
    from agentgym.trainers.update import Learner
    from agentgym.trainers.vcpo import score_grad_sq_norms

    model, tok = load_model(str(tiny_model_dir))
    learner = Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-3), None,
                      torch.device("cpu"), tok.pad_token_id or 0)
    a1 = _sample("a", "g", [0.0, 0.0], ids=(11, 12, 13, 14))
    a2 = _sample("a", "g", [0.0], ids=(11, 12, 13, 14, 15, 16))
    b = _sample("b", "g", [0.0, 0.0, 0.0], ids=(20, 21, 22, 23, 24))
    norms = score_grad_sq_norms(learner, [a1, a2, b], temperature=1.0, max_tokens=64)

    def by_hand(samples):
        model.zero_grad(set_to_none=True)
        total = 0
        for s in samples:
            ids = torch.tensor([s.input_ids])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            targets = ids[0, 1:]
            total = total + logp[s.prompt_len - 1:, :].gather(
                1, targets[s.prompt_len - 1:, None]).sum()
        total.backward()
        out = sum(float(p.grad.double().square().sum()) for p in model.parameters()
                  if p.grad is not None)
        model.zero_grad(set_to_none=True)
        return out

    assert norms["a"] == pytest.approx(by_hand([a1, a2]), rel=1e-4)
    assert norms["b"] == pytest.approx(by_hand([b]), rel=1e-4)
    assert all(p.grad is None for p in model.parameters())  # nothing left for the update


def test_vcpo_config_checks():
    from agentgym.trainers.config import load_config

    with pytest.raises(ConfigError, match="enable async_training.enabled=true"):
        load_config(None, ["async_training.vcpo.enabled=true"])
    with pytest.raises(ConfigError, match="trajectory-level estimator"):
        load_config(None, ["async_training.vcpo.enabled=true", "async_training.enabled=true",
                           "algorithm.estimator=gigpo", "rollout.context=window"])
    with pytest.raises(ConfigError, match="base_ess_ratio"):
        VCPOConfig(base_ess_ratio=0.0)
    load_config(None, ["async_training.vcpo.enabled=true", "rollout.april.enabled=true"])


def test_async_run_scales_the_learning_rate_by_ess(tmp_path, tiny_model_dir, monkeypatch):
    from agentgym.trainers import update
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    seen, real = [], update.ppo_update

    def spy(learner, samples, config, *, step, **kw):
        seen.append((step, learner.optimizer.param_groups[0]["lr"],
                     [s.advantage for s in samples]))
        return real(learner, samples, config, step=step, **kw)

    monkeypatch.setattr(update, "ppo_update", spy)
    overrides = [f"run_dir={tmp_path / 'run'}", "steps=3", "save_every=3",
                 f"model.path={tiny_model_dir}", "rollout.tasks_per_step=2",
                 "rollout.group_size=4", "rollout.max_tokens=4", "tensorboard=false",
                 "optim.lr=0.05", "env.id=agentgym/Sokoban-v0", "env.max_turns=2",
                 "async_training.enabled=true", "async_training.max_importance_weight=5",
                 "async_training.vcpo.enabled=true", "async_training.vcpo.lr_scaling=linear"]
    rows = read_metrics(train(load_config(None, overrides)))
    assert rows[0]["vcpo/ess_ratio"] == pytest.approx(1.0)  # step 0 is on-policy
    stale = [r for r in rows if r["async/stale_samples"] > 0]
    assert stale and all(r["vcpo/ess_ratio"] < 1.0 for r in stale)
    for (_step, lr, _), row in zip(seen, rows, strict=True):
        assert lr == pytest.approx(0.05 * row["vcpo/lr_scale"])
        assert row["vcpo/lr_scale"] == pytest.approx(row["vcpo/ess_ratio"])  # linear rule
        assert row["vcpo/ess"] == pytest.approx(row["vcpo/ess_ratio"] * row["samples"])
