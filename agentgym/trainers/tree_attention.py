"""Prefix-tree attention: each packed segment attends to its ancestors and itself only.

    O_s = softmax(Q_s [K_anc(s); K_s]^T / sqrt(d) + [0, C_s]) [V_anc(s); V_s]

A prefix tree (:func:`agentgym.trainers.packing.pack_prefix_tree`) lays shared prefixes out
once, parents before children, so its tokens fall into *segments*: runs in which each token's
parent is the token before it. Segment s (queries Q_s) sees the tokens on its path from the
root (anc(s), whole earlier segments or their leading parts) and its own tokens causally
(C_s: 0 on and below the diagonal, -inf above). The dense way gives every token an N × N
additive mask over the whole pack, so attention costs N² however little of it is allowed;
per segment it costs sum_s L_s (A_s + L_s), and the root segment runs as plain causal SDPA.
This is the idea of Prefix Grouper (Liu et al., 2025, "Prefix Grouper: Efficient GRPO
Training through Shared-Prefix Forward") for any prefix tree: a group's prompt, a shared
system prompt and full-history turns. Same outputs as the dense mask, to summation order.

The plan travels to the attention function as a keyword of the model's forward call
(``tree_plan=``; transformers hands extra keywords to its attention functions), so
gradient checkpointing's recomputation sees it too; the CPU attention of
:mod:`agentgym.policies.attention` runs :meth:`TreePlan.attend` when it gets one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentgym.policies.attention import NAME as GROUPED_SDPA
from agentgym.trainers.packing import PrefixTree


@dataclass(frozen=True)
class Segment:
    """One run of packed tokens ``[start, end)``, each the child of the one before.

    Attributes:
        start: First packed index.
        end: One past the last packed index.
        keys: Packed indices of the ancestors' tokens, root first, then ``start..end-1``;
            None for a segment without ancestors (plain causal attention).
        mask: ``(L, A + L)`` additive mask (0 = attend) for ``keys``; None with ``keys``.
    """

    start: int
    end: int
    keys: torch.Tensor | None
    mask: torch.Tensor | None


@dataclass(frozen=True)
class TreePlan:
    """The segments of one packed sequence, in packed order (they cover it)."""

    segments: tuple[Segment, ...]

    @property
    def attention_pairs(self) -> int:
        """Query-key pairs attended (for cost estimates; causal counts half a square)."""
        pairs = 0
        for s in self.segments:
            n = s.end - s.start
            pairs += n * (n + 1) // 2 + (0 if s.keys is None else n * (len(s.keys) - n))
        return pairs

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               scaling: float | None = None, dropout: float = 0.0) -> torch.Tensor:
        """Attention of query ``(1, H, N, D)`` over key/value ``(1, H_kv, N, D)``.

        Returns:
            ``(1, N, H, D)``, the layout transformers' attention functions return.
        """
        if query.shape[0] != 1:
            raise ValueError(f"a tree plan is for one packed row, got a batch of {query.shape[0]}")
        gqa = key.shape[1] != query.shape[1]
        parts = []
        for s in self.segments:
            q = query[:, :, s.start:s.end]
            if s.keys is None:
                k, v = key[:, :, s.start:s.end], value[:, :, s.start:s.end]
            else:
                k, v = key.index_select(2, s.keys), value.index_select(2, s.keys)
            mask = None if s.mask is None else s.mask.to(query.dtype)
            parts.append(torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, scale=scaling,
                is_causal=s.keys is None and s.end - s.start > 1, enable_gqa=gqa))
        return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def tree_plan(tree: PrefixTree, device: torch.device | str = "cpu",
              dtype: torch.dtype = torch.float32) -> TreePlan:
    """The segments of ``tree`` with each one's ancestor keys and mask."""
    parents = tree.parents
    starts = [i for i in range(len(parents)) if i == 0 or parents[i] != i - 1]
    ends = starts[1:] + [len(parents)]
    segment_of = [0] * len(parents)
    for k, (a, b) in enumerate(zip(starts, ends, strict=True)):
        segment_of[a:b] = [k] * (b - a)
    segments = []
    for a, b in zip(starts, ends, strict=True):
        ranges = []  # the path from the root, nearest first
        p = parents[a]
        while p >= 0:
            first = starts[segment_of[p]]
            ranges.append(range(first, p + 1))
            p = parents[first]
        if not ranges:
            segments.append(Segment(a, b, None, None))
            continue
        ancestors = [i for r in reversed(ranges) for i in r]
        keys = torch.tensor(ancestors + list(range(a, b)), dtype=torch.long, device=device)
        n = b - a
        own = torch.ones((n, n), dtype=torch.bool, device=device).tril()
        allowed = torch.cat([torch.ones((n, len(ancestors)), dtype=torch.bool, device=device),
                             own], dim=1)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)
        segments.append(Segment(a, b, keys, mask))
    return TreePlan(tuple(segments))


def runs_tree_attention(model: Any) -> bool:
    """Whether ``model``'s attention takes a ``tree_plan`` (the CPU grouped SDPA, no windows)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    if getattr(config, "_attn_implementation", None) != GROUPED_SDPA:
        return False
    # a sliding window limits what a token sees; the plan would not
    return not (getattr(config, "sliding_window", None)
                and getattr(config, "use_sliding_window", True))
