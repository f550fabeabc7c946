"""Grouped SDPA (agentgym.policies.attention) computes what transformers' ``sdpa`` does."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentgym.policies.attention import NAME, use_grouped_sdpa  # noqa: E402
from agentgym.policies.base import GenerationRequest, SamplingParams  # noqa: E402
from agentgym.policies.hf import TransformersPolicy  # noqa: E402
from agentgym.policies.models import tiny_model  # noqa: E402


def grouped_llama(tokenizer: Any, seed: int = 0) -> Any:
    """A tiny Llama with 6 query heads over 2 key/value heads, as SmolLM2 groups them."""
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer: Any) -> Any:
    return copy.deepcopy(smollm2_tokenizer)


def test_only_a_grouped_model_on_a_cpu_is_switched(tokenizer: Any) -> None:
    grouped = grouped_llama(tokenizer)
    assert use_grouped_sdpa(grouped) and grouped.config._attn_implementation == NAME
    assert use_grouped_sdpa(grouped)  # a second call keeps it
    plain = tiny_model(tokenizer=tokenizer)  # as many key/value heads as query heads
    assert not use_grouped_sdpa(plain)
    assert plain.config._attn_implementation == "sdpa"


def test_a_packed_training_pass_gives_the_same_logits_and_gradients(tokenizer: Any) -> None:
    """Forward and backward under a 4D mask (the packed update's) match ``sdpa``'s."""
    reference = grouped_llama(tokenizer, seed=1)
    grouped = copy.deepcopy(reference)
    assert use_grouped_sdpa(grouped)
    n = 12
    ids = torch.randint(0, len(tokenizer), (1, n))
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    allowed[8:, 4:8] = False  # two branches of a prefix tree after a shared stem of 4
    mask = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None]
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7]])
    outputs = []
    for model in (reference, grouped):
        model.train()
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None]).sum().backward()
        outputs.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (a, grads_a), (b, grads_b) = outputs
    torch.testing.assert_close(a, b)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(ga, gb)


def test_batched_decoding_is_unchanged(tokenizer: Any) -> None:
    """Rows of different lengths (left padding) joining a batch: the same greedy tokens."""
    reference = grouped_llama(tokenizer, seed=2)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    prompts = [tuple(tokenizer(f"<|im_start|>user\n{'word ' * k}{k}<|im_end|>\n",
                               add_special_tokens=False)["input_ids"]) for k in range(1, 9)]

    async def run(policy: TransformersPolicy) -> list[tuple[int, ...]]:
        async with policy:
            done = await asyncio.gather(*(policy.generate(
                [GenerationRequest(prompt_ids=p, params=greedy)]) for p in prompts))
        return [c.completion_ids for [c] in done]

    plain_model, grouped_model = copy.deepcopy(reference), copy.deepcopy(reference)
    plain = TransformersPolicy(plain_model, tokenizer)
    plain_model.set_attn_implementation("sdpa")  # undo the switch: the reference
    grouped = TransformersPolicy(grouped_model, tokenizer)
    assert grouped_model.config._attn_implementation == NAME
    assert asyncio.run(run(plain)) == asyncio.run(run(grouped))
