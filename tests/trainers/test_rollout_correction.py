"""TIS and MIS on π_old / μ: hand-computed weights, and the update with an injected gap between
the sampler's log-probs and the trainer's."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.batching import Sample
from agentgym.trainers.config import load_config
from agentgym.trainers.config_update import RolloutCorrectionConfig
from agentgym.trainers.rollout_correction import correct
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update, proximal_logprobs

LOG2 = math.log(2.0)


def _pair(deltas, advantage=1.0):
    """A sample whose sampler log-probs are the trainer's minus ``deltas`` (so ρ_t = e^δ)."""
    n = len(deltas)
    trainer = tuple(-1.0 - 0.1 * i for i in range(n))
    sampler = tuple(t - d for t, d in zip(trainer, deltas, strict=True))
    s = Sample("t", "g", 0, tuple(range(1, n + 3)), 2, advantage, sampler)
    return s, replace(s, completion_logprobs=trainer)


def test_tis_token_truncates_each_tokens_ratio():
    s, p = _pair([0.0, LOG2, 3 * LOG2, -LOG2], advantage=2.0)
    [out], m = correct([s], [p], RolloutCorrectionConfig("tis", "token", 4.0))
    assert out.completion_logprobs == p.completion_logprobs  # π_old in the PPO ratio
    np.testing.assert_allclose(out.token_advantages, [2.0, 4.0, 8.0, 1.0])  # 2·min(ρ, 4)
    assert m["correction/truncated_frac"] == pytest.approx(1 / 4)
    assert m["correction/ratio_max"] == pytest.approx(8.0)
    assert m["correction/ratio_min"] == pytest.approx(0.5)


def test_tis_sequence_uses_the_product_of_the_steps_ratios():
    s, p = _pair([LOG2, LOG2, -LOG2])  # ρ = 2·2·0.5 = 2
    [out], m = correct([s], [p], RolloutCorrectionConfig("tis", "sequence", 3.0))
    np.testing.assert_allclose(out.token_advantages, [2.0] * 3)
    s, p = _pair([LOG2] * 3)  # ρ = 8, truncated at 3
    [out], m = correct([s], [p], RolloutCorrectionConfig("tis", "sequence", 3.0))
    np.testing.assert_allclose(out.token_advantages, [3.0] * 3)
    assert m["correction/truncated_frac"] == 1.0


def test_mis_token_masks_tokens_outside_the_band_and_drops_empty_steps():
    s, p = _pair([0.0, 2 * LOG2, -2 * LOG2, 0.1])
    [out], m = correct([s], [p], RolloutCorrectionConfig("mis", "token", 2.0))
    assert out.mask == (1.0, 0.0, 0.0, 1.0) and out.num_completion_tokens == 2
    np.testing.assert_allclose(out.token_advantages, [1.0] * 4)  # kept tokens unweighted
    assert m["correction/masked_frac"] == pytest.approx(0.5)
    s, p = _pair([3 * LOG2, 3 * LOG2])
    kept, m = correct([s], [p], RolloutCorrectionConfig("mis", "token", 2.0))
    assert kept == [] and m["correction/masked_frac"] == 1.0


def test_mis_sequence_drops_the_whole_step():
    inside, p1 = _pair([LOG2, -LOG2, 0.5 * LOG2])  # ρ = √2
    outside, p2 = _pair([LOG2, LOG2])  # ρ = 4
    kept, m = correct([inside, outside], [p1, p2], RolloutCorrectionConfig("mis", "sequence", 2.0))
    assert [k.completion_logprobs for k in kept] == [p1.completion_logprobs]
    assert m["correction/masked_frac"] == 0.5


def test_packed_observation_tokens_keep_their_mask_and_a_missing_mu_counts_as_no_gap():
    s, p = _pair([LOG2, 5.0, LOG2])
    s, p = replace(s, mask=(1.0, 0.0, 1.0)), replace(p, mask=(1.0, 0.0, 1.0))
    [out], m = correct([s], [p], RolloutCorrectionConfig("mis", "token", 4.0))
    assert out.mask == (1.0, 0.0, 1.0) and m["correction/masked_frac"] == 0.0
    s, p = _pair([0.0, 0.0])
    s = replace(s, completion_logprobs=(float("nan"), s.completion_logprobs[1]))
    [out], m = correct([s], [p], RolloutCorrectionConfig("tis", "token", 2.0))
    np.testing.assert_allclose(out.token_advantages, [1.0, 1.0])


def test_bad_thresholds_are_refused():
    for bad in (1.0, 0.5, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="threshold"):
            RolloutCorrectionConfig("tis", "token", bad)


def _learner(model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return Learner(model, torch.optim.SGD(model.parameters(), lr=0.5), None,
                   torch.device("cpu"), pad_token_id=0)


def _samples(model, n=6):
    rng = np.random.default_rng(0)
    raw = [Sample(f"t{i}", f"g{i % 2}", 0,
                  tuple(int(x) for x in rng.integers(1, 1000, size=14)), 4,
                  float(rng.normal()), (0.0,) * 10) for i in range(n)]
    return proximal_logprobs(model, raw, budget=256, pad_id=0, device="cpu", temperature=1.0)


def _update(model_dir, samples, *overrides):
    learner = _learner(model_dir)
    metrics = ppo_update(learner, samples, UpdateConfig.of(load_config(None, list(overrides))),
                         step=0)
    return metrics, {n: p.detach().clone() for n, p in learner.model.named_parameters()}


def test_the_update_with_an_injected_gap_trains_as_on_hand_weighted_samples(tiny_model_dir):
    exact = _samples(_learner(tiny_model_dir).model)
    rng = np.random.default_rng(1)
    noisy = [replace(s, completion_logprobs=tuple(
        np.asarray(s.completion_logprobs) - rng.normal(0, 0.5, len(s.completion_logprobs))))
        for s in exact]  # an engine whose log-probs are off by N(0, 0.5²) per token
    tis = ["loss.rollout_correction.mode=tis", "loss.rollout_correction.threshold=1.5"]
    metrics, corrected = _update(tiny_model_dir, noisy, *tis)
    assert metrics["correction/truncated_frac"] > 0
    assert metrics["correction/ratio_max"] > 1.5
    # by hand: π_old in the ratio, each token's advantage times min(ρ_t, 1.5)
    by_hand = [replace(e, token_advantages=tuple(
        e.advantage * np.minimum(np.exp(np.subtract(e.completion_logprobs,
                                                    n.completion_logprobs)), 1.5)))
        for e, n in zip(exact, noisy, strict=True)]
    _, want = _update(tiny_model_dir, by_hand)
    for name, tensor in corrected.items():
        torch.testing.assert_close(tensor, want[name], atol=1e-6, rtol=1e-5)
    _, uncorrected = _update(tiny_model_dir, noisy)  # the gap, uncorrected, trains otherwise
    assert any(not torch.allclose(uncorrected[n], want[n], atol=1e-6) for n in want)


def test_no_gap_means_no_change(tiny_model_dir):
    exact = _samples(_learner(tiny_model_dir).model)
    metrics, corrected = _update(tiny_model_dir, exact, "loss.rollout_correction.mode=mis")
    _, plain = _update(tiny_model_dir, exact)
    assert metrics["correction/masked_frac"] == 0.0
    assert metrics["correction/ratio_max"] == pytest.approx(1.0, abs=1e-4)
    for name, tensor in corrected.items():
        torch.testing.assert_close(tensor, plain[name], atol=1e-6, rtol=1e-5)

