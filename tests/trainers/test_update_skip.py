"""Skipping zero-advantage samples in the update leaves the loss and the step unchanged."""

import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgym.trainers.batching import Sample
from agentgym.trainers.config import LossConfig, OptimConfig
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update


def tiny_llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)).float()


def samples(rng):
    out = []
    for i in range(8):
        p, c = int(rng.integers(3, 12)), int(rng.integers(2, 9))
        adv = 0.0 if i % 3 == 0 else float(rng.normal())  # three of eight are zero
        out.append(Sample(f"t{i}", "g", 0, tuple(int(x) for x in rng.integers(1, 97, p + c)),
                          p, adv, tuple(rng.normal(-3, 0.1, c))))
    return out


def step(base, rows, skip, **loss):
    model = copy.deepcopy(base)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=1.0), None,
                      torch.device("cpu"), 0)
    config = UpdateConfig(OptimConfig(grad_clip=0.0, mini_batches=2, max_tokens_per_micro_batch=40),
                          LossConfig(**loss), temperature=1.0, seed=0, skip_zero_advantage=skip)
    metrics = ppo_update(learner, rows, config, step=0)
    return metrics, [(p - b).detach() for p, b in zip(model.parameters(), base.parameters(),
                                                     strict=True)]


def test_zero_advantage_skip_keeps_the_token_mean_loss_and_gradient():
    base, rows = tiny_llama(), samples(np.random.default_rng(0))
    (m0, d0), (m1, d1) = step(base, rows, skip=False), step(base, rows, skip=True)
    assert m1["loss"] == pytest.approx(m0["loss"], rel=1e-6, abs=1e-9)
    assert max(float(d.abs().max()) for d in d0) > 1e-5
    for a, b in zip(d0, d1, strict=True):
        torch.testing.assert_close(b, a, atol=1e-7, rtol=1e-5)
    # dropping them before the update instead shrinks the normalizer: a larger loss
    m2, _ = step(base, [r for r in rows if r.advantage != 0], skip=False)
    assert abs(m2["loss"]) > abs(m0["loss"]) * 1.1


def test_no_skip_when_the_loss_reads_zero_advantage_tokens():
    cfg = UpdateConfig(OptimConfig(), LossConfig(kl_coef=0.01), 1.0, 0)
    assert cfg.skip_zero_advantage and not cfg.skips_zero_advantage
    bonus = UpdateConfig(OptimConfig(), LossConfig(entropy_coef=0.01), 1.0, 0)
    assert not bonus.skips_zero_advantage
    assert UpdateConfig(OptimConfig(), LossConfig(), 1.0, 0).skips_zero_advantage
