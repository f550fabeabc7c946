"""The output layer fused into the chunked log-softmax: same log-probs, entropies and gradients."""

import copy

import numpy as np
import pytest
import torch

from agentgym.trainers import fused_head
from agentgym.trainers.batching import micro_batches
from agentgym.trainers.fused_head import HeadLogSoftmax, plain_output_layer
from agentgym.trainers.loss import packed_token_logprobs, token_logprobs

from .test_packing import PAD, group_samples, history_samples

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def llama(tied: bool):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=tied)
    return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize("chunk_elements", [1 << 24, 11 * 3])  # one chunk; 3 rows a chunk
def test_gradients_match_finite_differences(monkeypatch, chunk_elements):
    monkeypatch.setattr(fused_head, "_CHUNK_ELEMENTS", chunk_elements)
    torch.manual_seed(0)
    hidden = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 5, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (7,))
    assert torch.autograd.gradcheck(
        lambda h, w: HeadLogSoftmax.apply(h, w, targets, 0.6, True), (hidden, weight))
    lp, ent = HeadLogSoftmax.apply(hidden, weight, targets, 0.6, True)
    ref = torch.log_softmax(hidden @ weight.T / 0.6, -1)
    torch.testing.assert_close(lp, ref.gather(-1, targets[:, None]).squeeze(-1))
    torch.testing.assert_close(ent, -(ref.exp() * ref).sum(-1))


def scores_and_grads(model, score, mb, enabled, monkeypatch):
    """Log-probs, entropies and every trained parameter's gradient of a weighted sum."""
    monkeypatch.setattr(fused_head, "ENABLED", enabled)
    model = copy.deepcopy(model)
    lp, ent = score(model, mb.input_ids, mb.attention_mask, 0.7, with_entropy=True,
                    mask=mb.loss_mask)
    weights = torch.linspace(-1, 1, lp.numel()).reshape(lp.shape)
    ((lp * weights).sum() + 0.3 * ent.sum()).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    return lp.detach(), ent.detach(), grads


@pytest.mark.parametrize("adapters", [False, True])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("score", [token_logprobs, packed_token_logprobs])
def test_fused_head_equals_the_logits_path(monkeypatch, score, tied, adapters):
    rng = np.random.default_rng(3)
    samples = group_samples(rng, "a") + group_samples(rng, "b", prompt_len=25) \
        + history_samples(rng)
    [mb] = micro_batches(samples, 10_000, PAD, pack=score is packed_token_logprobs)
    model = llama(tied).train()
    if adapters:
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
            task_type="CAUSAL_LM", init_lora_weights=False))
    assert plain_output_layer(model) is not None
    want = scores_and_grads(model, score, mb, False, monkeypatch)
    got = scores_and_grads(model, score, mb, True, monkeypatch)
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=0)
    assert got[2].keys() == want[2].keys() and want[2]
    for name, grad in want[2].items():
        torch.testing.assert_close(got[2][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_models_with_more_than_an_output_layer_keep_the_logits():
    config = transformers.GraniteConfig(  # divides its logits by logits_scaling
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2)
    assert plain_output_layer(transformers.GraniteForCausalLM(config)) is None
    model = llama(False)
    assert plain_output_layer(model) is not None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert plain_output_layer(model) is not None  # it runs in float32 there


def test_under_bf16_autocast_the_output_layer_runs_in_float32_both_ways():
    torch.manual_seed(0)
    hidden = torch.randn(40, 32, requires_grad=True)  # (N, d)
    weight = torch.randn(64, 32, requires_grad=True)  # (V, d)
    targets = torch.randint(0, 64, (40,))

    def scores(x: torch.Tensor) -> torch.Tensor:
        return x.float().log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)

    want = scores(hidden @ weight.T)
    want_grads = torch.autograd.grad(want.sum(), (hidden, weight))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = HeadLogSoftmax.apply(hidden, weight, targets, 1.0, False)
        got_grads = torch.autograd.grad(got.sum(), (hidden, weight))
        rounded = scores(hidden @ weight.T)  # what a bf16 output layer gives
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert (rounded - want).abs().max() > 1e-3  # so the test can tell the two apart
