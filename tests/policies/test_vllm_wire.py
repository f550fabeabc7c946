"""What a full weight sync writes for the engine: 16-bit engines get their own dtype."""

import torch

from agentgym.policies.vllm import wire_tensors


def _items():
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(4, 6, generator=gen)
    return [("w", weight.t()), ("steps", torch.arange(3)), ("half", weight[0].half())]


def test_a_bf16_engine_gets_bf16_tensors_rounded_as_its_own_copy_would():
    items = _items()
    out = wire_tensors(items, "bfloat16")
    assert out["w"].dtype == torch.bfloat16 and out["w"].is_contiguous()
    into = torch.empty(6, 4, dtype=torch.bfloat16)
    into.copy_(items[0][1])  # what the engine's load_weights does with a float32 tensor
    assert torch.equal(out["w"], into)
    assert out["steps"].dtype == torch.int64  # integers and 16-bit tensors as they are
    assert out["half"].dtype == torch.float16


def test_a_float32_engine_gets_the_trainers_tensors_unchanged():
    items = _items()
    for dtype in ("float32", "auto"):
        out = wire_tensors(items, dtype)
        assert out["w"].dtype == torch.float32 and out["w"].is_contiguous()
        assert torch.equal(out["w"], items[0][1])
