"""Shared-prefix packing is exact under peft LoRA too: same log-probs and the same update."""

import copy

import numpy as np
import pytest
import torch

from agentgym.trainers.batching import micro_batches
from agentgym.trainers.config import LossConfig, OptimConfig
from agentgym.trainers.loss import packed_token_logprobs, token_logprobs
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update

from .test_packing import PAD, group_samples, history_samples, tiny_llama

peft = pytest.importorskip("peft")
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_llama():
    """A tiny Llama with LoRA on every linear layer; B random so the adapters count."""
    torch.manual_seed(1)
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=ALL_LINEAR,
                             task_type="CAUSAL_LM", init_lora_weights=False)
    return peft.get_peft_model(tiny_llama(), config)


@pytest.mark.parametrize("layout", ["tree", "shared prompt"])
def test_packed_logprobs_equal_unpacked_under_lora(layout):
    rng = np.random.default_rng(4)
    samples = group_samples(rng, "a") + group_samples(rng, "b", prompt_len=25) \
        + history_samples(rng) if layout == "tree" else group_samples(rng, "a", 300, 6)
    model = lora_llama()
    [mb] = micro_batches(samples, 10_000, PAD, pack=True)
    want, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, 0.7, mask=mb.loss_mask)
    got, _ = packed_token_logprobs(model, mb.input_ids, mb.attention_mask, 0.7,
                                   mask=mb.loss_mask)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_lora_update_with_packing_matches_without():
    rng = np.random.default_rng(5)
    samples = group_samples(rng, "a") + group_samples(rng, "b") + history_samples(rng)
    base = lora_llama()
    deltas = {}
    for pack in (False, True):
        model = copy.deepcopy(base)
        trained = [p for p in model.parameters() if p.requires_grad]
        # Plain SGD with lr 1: the change of each adapter is its (unclipped) gradient.
        learner = Learner(model, torch.optim.SGD(trained, lr=1.0), None, torch.device("cpu"),
                          PAD)
        config = UpdateConfig(
            OptimConfig(max_tokens_per_micro_batch=150, grad_clip=0.0, pack_prefixes=pack),
            LossConfig(), temperature=1.0, seed=0)
        ppo_update(learner, samples, config, step=1)
        deltas[pack] = {n: (p - b).detach() for (n, p), b in
                        zip(model.named_parameters(), base.parameters(), strict=True)
                        if p.requires_grad}
    assert deltas[False] and all("lora_" in n for n in deltas[False])
    assert max(float(d.abs().max()) for d in deltas[False].values()) > 1e-4
    for name, want in deltas[False].items():
        torch.testing.assert_close(deltas[True][name], want, atol=1e-5, rtol=1e-4, msg=name)
