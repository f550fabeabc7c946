import math
from dataclasses import replace

import pytest
import torch

from agentgym.trainers import loss as loss_module
from agentgym.trainers.batching import Sample, TrainingDataError, micro_batches
from agentgym.trainers.loss import _TokenLogSoftmax, kl_k3, ppo_clip_loss, token_logprobs

transformers = pytest.importorskip("transformers")


def tiny_llama(seed=0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


def make_samples(n=6, seed=0, adv=None):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p, c = int(torch.randint(2, 12, (), generator=g)), int(torch.randint(1, 8, (), generator=g))
        ids = tuple(torch.randint(0, 64, (p + c,), generator=g).tolist())
        a = float(torch.randn((), generator=g)) if adv is None else adv[i]
        out.append(Sample(f"t{i}", "g", 0, ids, p, a, tuple(-1.0 for _ in range(c))))
    return out


def manual_logprobs(model, s, temperature):
    """log_softmax(logits/T) of each completion token, one unpadded sequence at a time."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([s.input_ids])).logits[0].float()  # (L, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    pos = torch.arange(s.prompt_len - 1, s.length - 1)  # positions predicting completions
    target = torch.tensor(s.input_ids[s.prompt_len:])
    return logp[pos, target], -(logp[pos].exp() * logp[pos]).sum(-1)


def test_token_logprobs_align_with_manual_log_softmax(model):
    samples = make_samples()
    (mb,) = micro_batches(samples, max_tokens=10_000, pad_id=0)
    with torch.no_grad():
        lp, ent = token_logprobs(model, mb.input_ids, mb.attention_mask, temperature=0.7,
                                 with_entropy=True, mask=mb.loss_mask)
        full, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, temperature=0.7)
    assert lp.shape == mb.loss_mask.shape and lp.dtype == torch.float32
    m = mb.loss_mask > 0
    assert torch.all(lp[~m] == 0) and torch.all(ent[~m] == 0)
    torch.testing.assert_close(lp[m], full[m], atol=1e-5, rtol=1e-5)  # logits_to_keep path
    for r, i in enumerate(mb.sample_indices):
        want_lp, want_ent = manual_logprobs(model, samples[i], 0.7)
        torch.testing.assert_close(lp[r][m[r]], want_lp, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent[r][m[r]], want_ent, atol=1e-5, rtol=1e-5)


def test_greedy_temperature_zero_scores_at_one(model):
    (mb,) = micro_batches(make_samples(2), max_tokens=1000, pad_id=0)
    with torch.no_grad():
        a, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, temperature=0.0)
        b, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, temperature=1.0)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(model, mb.input_ids, mb.attention_mask, temperature=-1.0)


@pytest.mark.parametrize("chunk_elements", [1 << 25, 11 * 3])  # one chunk; 3 rows a chunk
def test_custom_backward_matches_autograd(monkeypatch, chunk_elements):
    monkeypatch.setattr(loss_module, "_CHUNK_ELEMENTS", chunk_elements)
    torch.manual_seed(0)
    logits = torch.randn(7, 11, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (7,))
    assert torch.autograd.gradcheck(
        lambda x: _TokenLogSoftmax.apply(x, targets, 0.6, True), (logits,))
    lp, ent = _TokenLogSoftmax.apply(logits, targets, 0.6, True)
    ref = torch.log_softmax(logits / 0.6, -1)
    torch.testing.assert_close(lp, ref.gather(-1, targets[:, None]).squeeze(-1))
    torch.testing.assert_close(ent, -(ref.exp() * ref).sum(-1))


def test_half_precision_logits_are_scored_in_float32():
    torch.manual_seed(0)
    logits = torch.randn(5, 64).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 64, (5,))
    lp, _ = _TokenLogSoftmax.apply(logits, targets, 1.0, False)
    want = torch.log_softmax(logits.float(), -1).gather(-1, targets[:, None]).squeeze(-1)
    assert lp.dtype == torch.float32
    torch.testing.assert_close(lp, want)
    lp.sum().backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad.float()).all()


def test_ratio_one_gives_minus_mean_advantage_and_the_policy_gradient(model):
    (mb,) = micro_batches(make_samples(), max_tokens=10_000, pad_id=0)
    m, n = mb.loss_mask, mb.normalizer("token_mean")
    lp, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, mask=m)
    loss, stats = ppo_clip_loss(lp, lp.detach(), mb.advantages, m, normalizer=n)
    torch.testing.assert_close(loss, -(mb.advantages * m).sum() / n)
    assert stats.ratio_mean == pytest.approx(1.0) and stats.approx_kl == pytest.approx(0.0)
    assert stats.clip_low_frac == stats.clip_high_frac == 0 and stats.num_tokens == n
    got = torch.autograd.grad(loss, list(model.parameters()))
    lp2, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, mask=m)
    pg = -(mb.advantages * lp2 * m).sum() / n  # REINFORCE with advantages
    want = torch.autograd.grad(pg, list(model.parameters()))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-4)


def test_clipping_zeroes_gradient_and_is_counted():
    old = torch.zeros(1, 4)
    lp = torch.tensor([[math.log(1.5), math.log(1.1), math.log(0.5), math.log(1.5)]],
                      requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4)
    loss, stats = ppo_clip_loss(lp, old, adv, mask, normalizer=4)
    (grad,) = torch.autograd.grad(loss, lp)
    # ρ=1.5, A>0: clipped high; ρ=0.5, A<0: clipped low; both give no gradient.
    assert grad[0, 0] == 0 and grad[0, 2] == 0
    # ρ inside the range, or ρ=1.5 with A<0 (pessimistic side): -ρA/4 has gradient -A·ρ/4.
    torch.testing.assert_close(grad[0, 1], torch.tensor(-1.1 / 4))
    torch.testing.assert_close(grad[0, 3], torch.tensor(1.5 / 4))
    assert stats.clip_high_frac == 0.25 and stats.clip_low_frac == 0.25
    torch.testing.assert_close(loss, -(1.2 + 1.1 - 0.8 - 1.5) / 4 * torch.ones(()))
    _, wide = ppo_clip_loss(lp, old, adv, mask, normalizer=4, clip_high=0.6)
    assert wide.clip_high_frac == 0


def test_token_mean_vs_seq_mean_by_hand():
    lp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    adv = torch.tensor([[3.0, 0, 0], [1, 1, 1]])
    tok, _ = ppo_clip_loss(lp, lp, adv, mask, normalizer=4)
    seq, _ = ppo_clip_loss(lp, lp, adv, mask, aggregation="seq_mean", normalizer=2)
    assert tok.item() == pytest.approx(-(3 + 3) / 4)
    assert seq.item() == pytest.approx(-(3 + 1) / 2)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_accumulation_over_micro_batches_equals_one_batch(model, aggregation):
    g = torch.Generator().manual_seed(1)
    samples = []
    for s in make_samples(8, seed=3):  # recorded log-probs = current ones + noise, so some clip
        lp, _ = manual_logprobs(model, s, 0.9)
        noisy = lp + 0.3 * torch.randn(lp.shape, generator=g)
        samples.append(replace(s, completion_logprobs=tuple(noisy.tolist())))
    ref_model = tiny_llama(seed=1)
    small = micro_batches(samples, max_tokens=40, pad_id=0)
    (big,) = micro_batches(samples, max_tokens=10_000, pad_id=0)
    assert len(small) > 2

    def run(mbs):
        model.zero_grad()
        total, clipped = 0.0, 0.0
        for mb in mbs:
            lp, ent = token_logprobs(model, mb.input_ids, mb.attention_mask, temperature=0.9,
                                     with_entropy=True, mask=mb.loss_mask)
            with torch.no_grad():
                ref, _ = token_logprobs(ref_model, mb.input_ids, mb.attention_mask, 0.9,
                                        mask=mb.loss_mask)
            loss, stats = ppo_clip_loss(
                lp, mb.old_logprobs, mb.advantages, mb.loss_mask, aggregation=aggregation,
                normalizer=mb.normalizer(aggregation), ref_logprobs=ref, kl_coef=0.1,
                entropy=ent, entropy_coef=0.01)
            loss.backward()
            total += loss.item()
            clipped += (stats.clip_low_frac + stats.clip_high_frac) * stats.num_tokens
        return total, clipped, [p.grad.clone() for p in model.parameters()]

    loss_small, clipped_small, grads_small = run(small)
    loss_big, clipped_big, grads_big = run([big])
    assert clipped_big > 0 and clipped_small == pytest.approx(clipped_big)
    assert loss_small == pytest.approx(loss_big, rel=1e-5, abs=1e-6)
    for got, want in zip(grads_small, grads_big, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_recorded_logprobs_line_up_with_recomputed(model):
    samples = []
    for s in make_samples(5, seed=7):
        lp, _ = manual_logprobs(model, s, 0.8)  # what the generation backend records
        samples.append(replace(s, completion_logprobs=tuple(lp.tolist())))
    for mb in micro_batches(samples, max_tokens=30, pad_id=63):
        with torch.no_grad():
            lp, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, 0.8, mask=mb.loss_mask)
        m = mb.loss_mask > 0
        torch.testing.assert_close(lp[m], mb.old_logprobs[m], atol=1e-5, rtol=1e-5)
        _, stats = ppo_clip_loss(lp, mb.old_logprobs, mb.advantages, mb.loss_mask,
                                 normalizer=mb.normalizer("token_mean"))
        assert stats.ratio_mean == pytest.approx(1.0, abs=1e-5)


def test_kl_k3_is_nonnegative_and_zero_when_equal():
    torch.manual_seed(0)
    a, b = torch.randn(1000) * 3, torch.randn(1000) * 3
    assert torch.all(kl_k3(a, b) >= 0)
    assert torch.all(kl_k3(a, a) == 0)
    lp, mask, zero = -torch.rand(2, 5), torch.ones(2, 5), torch.zeros(2, 5)
    loss, stats = ppo_clip_loss(lp, lp, zero, mask, normalizer=10, ref_logprobs=lp, kl_coef=0.5)
    assert loss.item() == 0 and stats.kl_ref == 0
    loss, stats = ppo_clip_loss(lp, lp, zero, mask, normalizer=10, ref_logprobs=lp - 1,
                                kl_coef=0.5)
    assert stats.kl_ref > 0 and loss.item() == pytest.approx(0.5 * stats.kl_ref)
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        ppo_clip_loss(lp, lp, zero, mask, normalizer=10, kl_coef=0.5)


def test_entropy_bonus_is_subtracted():
    lp, mask, adv = torch.zeros(1, 4), torch.tensor([[1.0, 1, 0, 0]]), torch.ones(1, 4)
    ent = torch.tensor([[2.0, 4.0, 100.0, 100.0]])
    base, _ = ppo_clip_loss(lp, lp, adv, mask, normalizer=2)
    loss, stats = ppo_clip_loss(lp, lp, adv, mask, normalizer=2, entropy=ent, entropy_coef=0.1)
    assert loss.item() == pytest.approx(base.item() - 0.1 * 3.0)
    assert stats.entropy == pytest.approx(3.0) and stats.kl_ref is None


def test_nan_old_logprobs_raise_and_ask_for_recompute():
    lp = torch.zeros(1, 3)
    old = torch.tensor([[math.nan, 0.0, math.nan]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # NaN off the mask is ignored
    with pytest.raises(TrainingDataError, match="NaN at 1 completion tokens.*recompute"):
        ppo_clip_loss(lp, old, torch.ones(1, 3), mask, normalizer=2)
    lp = torch.zeros(1, 3, requires_grad=True)
    loss, _ = ppo_clip_loss(lp, old.nan_to_num(nan=0.0, posinf=0.0).where(mask > 0, math.nan),
                            torch.ones(1, 3), mask, normalizer=2)
    (grad,) = torch.autograd.grad(loss, lp)
    assert math.isfinite(loss.item()) and torch.isfinite(grad).all() and grad[0, 2] == 0


def test_bad_arguments_raise():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="shape of logprobs"):
        ppo_clip_loss(lp, torch.zeros(2, 4), lp, lp, normalizer=1)
    with pytest.raises(ValueError, match="normalizer must be > 0"):
        ppo_clip_loss(lp, lp, lp, lp, normalizer=0)
    with pytest.raises(ValueError, match="aggregation"):
        ppo_clip_loss(lp, lp, lp, lp, normalizer=1, aggregation="sum")
