"""Sampling one token per row with per-row settings, and recomputing behaviour log-probs.

The behaviour log-prob of a sampled token is ``log_softmax(logits / T)`` at that token, with
``T = 1`` for greedy rows; top_p does not enter it (see :mod:`agentgym.policies.hf`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

_TOP_P_CANDIDATES = 256  # top_p looks at the 256 likeliest tokens first, sorts all if short


def sample_next(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                generators: Sequence[torch.Generator | None], rng: torch.Generator
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row, each row with its own settings.

    Args:
        logits: ``(B, V)`` float32 next-token logits.
        temperature: ``(B,)``; 0 means greedy.
        top_p: ``(B,)`` nucleus mass per row.
        generators: Per-row generator, or None to draw from ``rng``.
        rng: Shared generator for rows without their own.

    Returns:
        ``(tokens, logprobs)``, both ``(B,)``: the sampled ids and their behaviour log-probs
        ``log_softmax(logits / T)`` (T = 1 for greedy rows; top_p not applied).
    """
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits / scale[:, None], dim=-1)  # (B, V)
    tokens = logits.argmax(dim=-1)
    rows = (~greedy).nonzero().flatten().tolist()
    if rows:
        probs = logp[rows].exp()  # (S, V) over the sampled rows
        nucleus = top_p[rows]
        if bool((nucleus < 1).any()):
            probs = _nucleus(probs, nucleus)
        # Inverse-CDF sampling with one uniform per row: a row's draw depends only on its
        # own generator (reproducible in any batch), and it is far faster than multinomial.
        uniform = torch.empty(len(rows), dtype=torch.float64, device=logits.device)
        shared = [k for k, i in enumerate(rows) if generators[i] is None]
        if shared:
            uniform[shared] = torch.rand(len(shared), generator=rng, dtype=torch.float64,
                                         device=logits.device)
        for k, i in enumerate(rows):
            if generators[i] is not None:
                uniform[k] = torch.rand((), generator=generators[i], dtype=torch.float64,
                                        device=logits.device)
        cdf = probs.double().cumsum(dim=-1)  # (S, V)
        total = cdf[:, -1]
        # Stay below the total: the first cdf entry above the target has a positive mass.
        target = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
        drawn = torch.searchsorted(cdf, target[:, None], right=True)
        tokens[rows] = drawn.squeeze(-1).clamp(max=logits.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row beyond its top_p mass (the most likely token always stays)."""
    top, order = probs.topk(min(_TOP_P_CANDIDATES, probs.shape[-1]), dim=-1)  # sorted
    if bool((top.sum(dim=-1) < top_p).any()):  # a nucleus reaches past the candidates
        top, order = probs.sort(dim=-1, descending=True)  # (5-10x slower than topk)
    before = top.cumsum(dim=-1) - top  # mass strictly above each token
    top = top.masked_fill(before >= top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter(-1, order, top)


def completion_logprobs(model: Any, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                        temperature: float = 1.0) -> list[float]:
    """Recompute the behaviour log-probs of a completion with one plain forward pass.

    This is the quantity :class:`TransformersPolicy` records (see the module docstring):
    ``log_softmax(logits / T)`` at each completion token, T = 1 when ``temperature == 0``.

    Args:
        model: The causal LM.
        prompt_ids: Prompt token ids.
        completion_ids: Completion token ids.
        temperature: The sampling temperature of the completion.

    Returns:
        One log-prob per completion token.
    """
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)], device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()  # (C, V)
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / scale, dim=-1)
    target = torch.tensor(list(completion_ids), device=device)[:, None]
    return logp.gather(-1, target).squeeze(-1).tolist()
