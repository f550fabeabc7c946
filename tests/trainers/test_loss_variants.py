"""GSPO, CISPO and Dr. GRPO's seq_sum aggregation against hand-computed cases.

The case: two sequences, the first with two completion tokens (ρ = 1.25 and 0.8, A = +1),
the second with one (ρ = 1.5, A = −2) and a padding column; ε_low = ε_high = 0.2.
"""

import math

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.batching import Sample, micro_batches
from agentgym.trainers.config import LossConfig, load_config
from agentgym.trainers.loss import ppo_clip_loss

NEW = [[math.log(0.5), math.log(0.4)], [math.log(0.3), 0.0]]
OLD = [[math.log(0.4), math.log(0.5)], [math.log(0.2), 0.0]]
ADV = [[1.0, 1.0], [-2.0, 0.0]]
MASK = [[1.0, 1.0], [1.0, 0.0]]


def case(policy_loss, aggregation="token_mean", normalizer=3.0):
    logprobs = torch.tensor(NEW, dtype=torch.float64, requires_grad=True)
    loss, stats = ppo_clip_loss(logprobs, torch.tensor(OLD, dtype=torch.float64),
                                torch.tensor(ADV, dtype=torch.float64),
                                torch.tensor(MASK, dtype=torch.float64),
                                aggregation=aggregation, normalizer=normalizer,
                                policy_loss=policy_loss)
    loss.backward()
    assert logprobs.grad is not None
    return float(loss.detach()), sum(logprobs.grad.tolist(), []), stats


def test_ppo_hand_computed():
    # token 1: ρ=1.25, A=1 → clipped to 1.2 (no gradient); token 2: ρ=0.8 → −0.8, gradient −0.8;
    # token 3: ρ=1.5, A=−2 → min(−3, −2.4) = −3 unclipped, gradient −A·ρ = 3.
    loss, grad, stats = case("ppo")
    assert loss == pytest.approx((-1.2 - 0.8 + 3.0) / 3)
    assert grad == pytest.approx([0.0, -0.8 / 3, 3.0 / 3, 0.0])
    assert stats.clip_high_frac == pytest.approx(1 / 3) and stats.clip_low_frac == 0.0


def test_gspo_hand_computed():
    # s_1 = exp((log 1.25 + log 0.8)/2) = 1 (in range): ℓ = −1 on both tokens;
    # s_2 = 1.5, A = −2: min(−3, −2.4) = −3, so ℓ = 3. seq_mean over 2 sequences: (−1 + 3)/2.
    # Gradient of ℓ_t: −A·s_i (GSPO-token), then /|y_i| (seq_mean) and /2 sequences.
    loss, grad, stats = case("gspo", "seq_mean", normalizer=2.0)
    assert loss == pytest.approx(1.0)
    assert grad == pytest.approx([-0.25, -0.25, 1.5, 0.0])
    assert stats.clip_high_frac == 0.0 and stats.ratio_mean == pytest.approx((1.25 + 0.8 + 1.5) / 3)


def test_gspo_gradient_is_the_sequence_level_objective():
    """GSPO-token with one advantage per sequence has GSPO's gradient (paper, eq. 11 vs 13)."""
    g = torch.Generator().manual_seed(0)
    new = torch.randn(3, 5, generator=g, dtype=torch.float64) * 0.1 - 1
    old = new.detach() + torch.randn(3, 5, generator=g, dtype=torch.float64) * 0.1
    adv = torch.tensor([[0.7], [-1.3], [0.2]], dtype=torch.float64).expand(3, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.float64)
    a = new.clone().requires_grad_(True)
    ppo_clip_loss(a, old, adv, mask, aggregation="seq_mean", normalizer=3.0,
                  policy_loss="gspo", clip_low=0.05, clip_high=0.05)[0].backward()
    b = new.clone().requires_grad_(True)  # −1/G Σ_i min(s_i A_i, clip(s_i) A_i), s_i direct
    s = torch.exp(((b - old) * mask).sum(-1) / mask.sum(-1))
    a_i = adv[:, 0]
    (-torch.minimum(s * a_i, s.clamp(0.95, 1.05) * a_i).sum() / 3).backward()
    torch.testing.assert_close(a.grad, b.grad * mask)


def test_cispo_hand_computed():
    # weights sg[clip(ρ, 0.8, 1.2)] = 1.2, 0.8, 1.2; ℓ_t = −w·A·log π; gradient −w·A, also
    # on the clipped first token (CISPO's point: no token loses its gradient).
    loss, grad, stats = case("cispo")
    want = (-1.2 * math.log(0.5) - 0.8 * math.log(0.4) + 2.4 * math.log(0.3)) / 3
    assert loss == pytest.approx(want)
    assert grad == pytest.approx([-1.2 / 3, -0.8 / 3, 2.4 / 3, 0.0])
    assert stats.clip_high_frac == pytest.approx(1 / 3)


def test_seq_sum_divides_by_a_constant_length():
    # Dr. GRPO: Σ_i Σ_t ℓ_t / (N_seqs · L_max) with L_max = 4: the PPO case's −1.2 − 0.8 + 3 over 8.
    loss, grad, _ = case("ppo", "seq_sum", normalizer=2 * 4)
    assert loss == pytest.approx(1.0 / 8)
    assert grad == pytest.approx([0.0, -0.8 / 8, 3.0 / 8, 0.0])


def test_seq_sum_normalizer_and_errors():
    samples = [Sample("t0", "g", 0, (1, 2, 3, 4), 2, 1.0, (-1.0, -1.0)),
               Sample("t1", "g", 0, (1, 2, 3), 2, 1.0, (-1.0,))]
    (mb,) = micro_batches(samples, max_tokens=100, pad_id=0)
    assert mb.normalizer("seq_sum", max_tokens=64) == 2 * 64
    with pytest.raises(ValueError, match="max_tokens"):
        mb.normalizer("seq_sum")
    with pytest.raises(ValueError, match="policy_loss"):
        case("grpo")


def test_config_options():
    config = load_config(None, ["loss.policy_loss=gspo", "loss.aggregation=seq_sum"])
    assert config.loss.policy_loss == "gspo" and config.loss.aggregation == "seq_sum"
    with pytest.raises(ConfigError, match="policy_loss must be one of"):
        load_config(None, ["loss.policy_loss=gpso"])
    with pytest.raises(ConfigError, match="max_completion_tokens"):
        LossConfig(max_completion_tokens=0)


@pytest.mark.parametrize(("policy_loss", "aggregation"),
                         [("gspo", "seq_mean"), ("cispo", "token_mean"), ("ppo", "seq_sum")])
def test_each_variant_trains_a_step(tmp_path, tiny_model_dir, policy_loss, aggregation):
    """The config options reach the update: one step on a tiny model moves its weights."""
    import json

    from safetensors.torch import load_file

    from agentgym.trainers.config import TrainConfig, from_dict
    from agentgym.trainers.loop import build, train

    data = {"run_dir": str(tmp_path / "run"), "steps": 1, "save_every": 1, "tensorboard": False,
            "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
            "model": {"path": str(tiny_model_dir)},
            "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
            "algorithm": {"options": {"mode": "mean_norm"}},
            "loss": {"policy_loss": policy_loss, "aggregation": aggregation},
            "optim": {"lr": 1e-3}}
    cfg = from_dict(TrainConfig, data)
    before = {n: p.detach().clone() for n, p in build(cfg).model.named_parameters()}
    import shutil

    shutil.rmtree(cfg.run_dir)
    run = train(cfg)
    after = load_file(run / "checkpoints" / "step-000001" / "model.safetensors")
    assert any(not torch.equal(after[n], before[n]) for n in before)
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert math.isfinite(row["loss"]) and row["samples"] > 0
