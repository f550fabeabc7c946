"""The learning-rate warm-up: step k moves the weights k / warmup_steps as far, then fully."""

import copy

import numpy as np
import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.config import LossConfig, OptimConfig, load_config
from agentgym.trainers.update import Learner, LocalUpdater, UpdateConfig, ppo_update

from .test_update_skip import samples, tiny_llama


def moved(base, rows, step, warmup, lr_scale=None):
    """The weights' change of one update (plain SGD: proportional to the rate) and its metrics."""
    model = copy.deepcopy(base)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    learner = Learner(model, optimizer, None, torch.device("cpu"), 0)
    config = UpdateConfig(OptimConfig(lr=0.5, grad_clip=0.0, warmup_steps=warmup),
                          LossConfig(), temperature=1.0, seed=0)
    if lr_scale is None:
        metrics = ppo_update(learner, rows, config, step=step)
    else:
        metrics = LocalUpdater(learner, config).update(rows, step, lr_scale=lr_scale)
    assert optimizer.param_groups[0]["lr"] == 0.5  # the schedule never sticks to the optimizer
    delta = torch.cat([(p - b).detach().flatten()
                       for p, b in zip(model.parameters(), base.parameters(), strict=True)])
    return delta, metrics


def test_warmup_scales_the_first_steps_linearly_then_stops():
    base, rows = tiny_llama(), samples(np.random.default_rng(1))
    full, m_full = moved(base, rows, step=0, warmup=0)
    assert float(full.abs().max()) > 1e-5 and m_full["lr"] == 0.5
    for step, factor in [(0, 0.25), (1, 0.5), (2, 0.75), (3, 1.0), (7, 1.0)]:
        # the same samples and sample order at every step: only the rate differs
        ref, _ = moved(base, rows, step=step, warmup=0)
        got, metrics = moved(base, rows, step=step, warmup=4)
        assert metrics["lr"] == pytest.approx(0.5 * factor)
        torch.testing.assert_close(got, ref * factor, atol=1e-7, rtol=1e-4)


def test_warmup_composes_with_an_updater_scale():
    base, rows = tiny_llama(), samples(np.random.default_rng(2))
    ref, _ = moved(base, rows, step=1, warmup=0)
    got, metrics = moved(base, rows, step=1, warmup=4, lr_scale=0.5)
    assert metrics["lr"] == pytest.approx(0.5 * 0.5 * 0.5)
    torch.testing.assert_close(got, ref * 0.25, atol=1e-7, rtol=1e-4)


def test_warmup_config():
    assert OptimConfig().lr_factor(0) == 1.0
    assert [OptimConfig(warmup_steps=3).lr_factor(k) for k in range(4)] == pytest.approx(
        [1 / 3, 2 / 3, 1.0, 1.0])
    assert load_config(None, ["optim.warmup_steps=2"]).optim.warmup_steps == 2
    with pytest.raises(ConfigError, match="optim.warmup_steps must be >= 0"):
        OptimConfig(warmup_steps=-1)
