"""Grouped-query attention on a CPU without copying the keys and values of every head.

    softmax(Q_h K_g(h)^T / sqrt(d) + M) V_g(h),   g(h) = h // (H / H_kv)

In grouped-query attention (Ainslie et al., 2023, "GQA"; SmolLM2-135M: 9 query heads, 3
key/value heads) each query head h reads the keys and values of its group g(h).
transformers' ``sdpa`` attention hands PyTorch's SDPA the keys and values repeated to every
query head (``repeat_kv``) whenever an attention mask is given outside XPU and MPS. A
decoder always gives one (rows are left-padded), so every decode step copied each layer's
whole cache H / H_kv times: on two CPU cores, with 64 rows of 600 cached tokens, that copy
and its memory traffic took more time than the model's own arithmetic. PyTorch's SDPA reads
the groups itself (``enable_gqa=True``, forward and backward, masked or not, on the CPU
kernels), with the same result.

:func:`use_grouped_sdpa` switches a model on a CPU to :func:`grouped_sdpa_forward`, which
is transformers' SDPA call less the copy; the masks are those of ``sdpa``. Given a
``tree_plan`` keyword (a packed prefix tree, ``agentgym/trainers/tree_attention.py``), it
attends segment by segment as the plan says instead.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

NAME = "agentgym_grouped_sdpa"
"""The attention implementation's registered name (``config._attn_implementation``)."""


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                         value: torch.Tensor, attention_mask: torch.Tensor | None,
                         dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs: Any
                         ) -> tuple[torch.Tensor, None]:
    """SDPA over query ``(B, H, Q, D)`` and key/value ``(B, H_kv, K, D)`` heads, grouped.

    Returns:
        ``(B, Q, H, D)`` outputs and no attention weights, as transformers' ``sdpa``.
    """
    plan = kwargs.get("tree_plan")
    if plan is not None:  # a packed prefix tree (agentgym/trainers/tree_attention.py)
        return plan.attend(query, key, value, scaling=scaling, dropout=dropout), None
    if (kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
            or key.shape[-1] != value.shape[-1]):
        # paged caches and position biases: transformers' own path
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    causal = bool(causal) and query.shape[2] > 1 and attention_mask is None
    if causal and key.shape[2] > query.shape[2]:
        key, value = key[:, :, :query.shape[2]], value[:, :, :query.shape[2]]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=causal, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, grouped_sdpa_forward)
AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def use_grouped_sdpa(model: Any) -> bool:
    """Switch ``model`` to :func:`grouped_sdpa_forward` where that saves the copy.

    Only a model on a CPU that runs transformers' ``sdpa`` with fewer key/value heads than
    query heads is switched (on CUDA the masked grouped call would leave the fused kernels).

    Returns:
        Whether the model now runs :data:`NAME`.
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return getattr(config, "_attn_implementation", None) == NAME
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    on_cpu = all(p.device.type == "cpu" for p in inner.parameters())
    if not (on_cpu and heads and kv_heads < heads):
        return False
    inner.set_attn_implementation(NAME)
    return True
