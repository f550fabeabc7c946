"""Rollout correction: truncated (TIS) and masked (MIS) importance sampling on π_old / μ.

The engine that sampled a token (vLLM, or any backend with other kernels or another dtype)
gives it a log-prob log μ(a_t|s_t) that differs from the trainer's own, log π_old(a_t|s_t),
computed by a forward pass on the same weights before the update. PPO's ratio must be taken
against π_old, and the gap corrected by importance weights on

    ρ_t = π_old(a_t|s_t) / μ(a_t|s_t)                      (token level)
    ρ   = Π_t ρ_t = exp(Σ_t log ρ_t)                        (sequence level: one step)

    L = −E_t[ w_t · min(r_t A_t, clip(r_t, 1−ε_low, 1+ε_high) A_t) ],  r_t = π_θ / π_old

- TIS (truncated IS; Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
  Off-Policy RL Training"; verl's rollout correction, SkyRL's TIS): w = min(ρ, C).
- MIS (masked IS; verl's rollout correction): w = 1 when 1/C ≤ ρ ≤ C, else the token (token
  level) or the whole step (sequence level) leaves the loss.

The decoupled form (π_old in the clip, w outside) is AReaL's (Fu et al. 2025,
arXiv:2505.24298). Deviation: w is folded into the per-token advantages (``Sample``'s
``token_advantages``), which is the same loss because the PPO term is linear in A_t.

Composition with async training: stale steps are first corrected
(``agentgym/trainers/methods/offpolicy``) toward the proximal policy (their log-probs become π_prox,
already the trainer's); here π_old is recomputed on the same weights, so their ρ is 1 up to
float noise and only fresh steps, whose μ came from the engine, are reweighted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from agentgym.trainers.batching import Sample
from agentgym.trainers.config_update import RolloutCorrectionConfig

_MAX_LOG = 50.0  # exp() of larger log-ratios only ever truncates or masks


def correct(samples: Sequence[Sample], proximal: Sequence[Sample],
            config: RolloutCorrectionConfig) -> tuple[list[Sample], dict[str, float]]:
    """Apply TIS or MIS to ``samples`` given the trainer's recomputed log-probs.

    Args:
        samples: The step's samples; ``completion_logprobs`` are the sampler's (μ).
        proximal: The same samples with the trainer's log-probs (π_old), in the same order.
        config: Mode, level and threshold C.

    Returns:
        The samples to train on (π_old as their old log-probs, advantages weighted, masked
        tokens or dropped steps for MIS) and the metrics ``correction/*``.
    """
    out: list[Sample] = []
    ratios: list[float] = []  # ρ of each unit (token or step) that trains
    cut = 0
    for s, p in zip(samples, proximal, strict=True):
        live = np.asarray(s.mask or (1.0,) * len(s.completion_logprobs)) > 0
        # a token without a recorded μ (NaN) carries no evidence of a gap: ρ = 1
        log_rho = np.nan_to_num(np.where(live, np.subtract(p.completion_logprobs,
                                                           s.completion_logprobs), 0.0), nan=0.0)
        adv = np.asarray(s.token_advantages or (s.advantage,) * len(live), dtype=np.float64)
        if config.level == "sequence":
            rho = math.exp(min(float(log_rho.sum()), _MAX_LOG))
            ratios.append(rho)
            if config.mode == "tis":
                cut += rho > config.threshold
                out.append(_with(p, adv * min(rho, config.threshold), None))
            elif 1 / config.threshold <= rho <= config.threshold:
                out.append(_with(p, adv, None))
            else:
                cut += 1  # the whole step leaves the loss
            continue
        rho_t = np.exp(np.minimum(log_rho, _MAX_LOG))
        ratios.extend(rho_t[live].tolist())
        if config.mode == "tis":
            cut += int((rho_t[live] > config.threshold).sum())
            out.append(_with(p, adv * np.minimum(rho_t, config.threshold), None))
        else:
            keep = live & (rho_t >= 1 / config.threshold) & (rho_t <= config.threshold)
            cut += int(live.sum() - keep.sum())
            if keep.any():
                out.append(_with(p, adv, keep))
    r = np.asarray(ratios or [1.0])
    name = "truncated" if config.mode == "tis" else "masked"
    return out, {"correction/ratio_mean": float(r.mean()), "correction/ratio_max": float(r.max()),
                 "correction/ratio_min": float(r.min()),
                 "correction/abs_log_ratio_mean": float(np.abs(np.log(r)).mean()),
                 f"correction/{name}_frac": cut / max(len(ratios), 1)}


def _with(proximal: Sample, advantages: np.ndarray, keep: np.ndarray | None) -> Sample:
    """``proximal`` (π_old) with per-token advantages and, for MIS, a narrower mask."""
    mask = proximal.mask
    if keep is not None:
        mask = tuple(float(k) for k in keep)
    return replace(proximal, token_advantages=tuple(float(a) for a in advantages), mask=mask)
