r"""VCPO: variance-controlled off-policy updates (Huang et al. 2026, arXiv 2602.17616).

Stale rollouts make importance weights heavy-tailed, so a few samples dominate an update.
VCPO controls the variance of the off-policy policy gradient in two ways.

**ESS-scaled learning rate.** With the batch's importance weights w_1 … w_B,

    ESS = (Σ_i w_i)² / Σ_i w_i²,     ρ = ESS / B ∈ (0, 1],
    η_eff = η · min(1, ρ / ρ_base)^{1/2}      (``lr_scaling: sqrt``, AdamW's square-root rule)
    η_eff = η · min(1, ρ / ρ_base)            (``lr_scaling: linear``)

so an update whose weight mass sits on a few samples takes a smaller step. Fresh samples
have w = 1: an on-policy batch has ρ = 1 and keeps η.

**Off-policy optimal baseline (OPOB).** For trajectory i of a group, with return R_i,
sequence importance weight w_i and score-function gradient g_i = ∇_θ Σ_t log π_θ(y_t),
the baseline minimising the variance of Σ_i w_i (R_i − b) g_i is

    b* = Σ_i w_i² ‖g_i‖² R_i / Σ_i w_i² ‖g_i‖²          (over the G rollouts of a task)

and every turn of trajectory i gets the advantage A_i = R_i − b*. ‖g_i‖² is exact: one
backward pass per trajectory on the current weights, before the update.

Deviations and choices:

- The importance weight of a sample (one turn) is the geometric mean of its token ratios,
  exp(mean_t(log π_prox − log μ)), as in the trainer's decoupled-PPO correction; w_i of a
  trajectory is the same mean over all of its completion tokens. ESS is taken over the
  untruncated sample weights of the whole step (every mini-batch takes the same η_eff).
- The baseline is the group-scope one without std normalisation (REINFORCE with b*); it
  replaces the estimator's advantages, so it needs a trajectory-level estimator (GRPO, RLOO);
  the estimator's invalid-turn penalty λ is not applied on top.
- ``max_importance_weight`` still truncates the weight the loss applies (w_i in b* is
  truncated the same way), beside, not instead of, the learning-rate scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from agentgym.trainers.config_run import VCPOConfig  # the config section: re-exported

if TYPE_CHECKING:
    from agentgym.trainers.batching import Sample
    from agentgym.trainers.update import Learner


def effective_sample_size(weights: Sequence[float]) -> float:
    """Kish's ESS = (Σw)² / Σw² (0 for no weights)."""
    w = np.asarray(weights, dtype=np.float64)
    total = float(np.square(w).sum())
    return float(w.sum()) ** 2 / total if total > 0 else 0.0


def lr_scale(ess_ratio: float, config: VCPOConfig) -> float:
    """The factor η_eff / η for a batch whose ESS / B is ``ess_ratio``."""
    if config.lr_scaling == "none":
        return 1.0
    ratio = min(1.0, ess_ratio / config.base_ess_ratio)
    return math.sqrt(ratio) if config.lr_scaling == "sqrt" else ratio


def opob_baseline(rewards: Sequence[float], weights: Sequence[float],
                  grad_sq_norms: Sequence[float]) -> float:
    """b* = Σ w²‖g‖²R / Σ w²‖g‖²; the plain mean of R when every w²‖g‖² is 0."""
    r = np.asarray(rewards, dtype=np.float64)
    c = np.square(np.asarray(weights, dtype=np.float64)) * np.asarray(grad_sq_norms,
                                                                      dtype=np.float64)
    total = float(c.sum())
    return float((c * r).sum() / total) if total > 0 else float(r.mean())


def sample_log_weights(samples: Sequence[Sample], proximal: Mapping[int, Sample]
                       ) -> list[tuple[float, int]]:
    """Per sample: Σ_t (log π_prox − log μ) over its completion tokens, and the token count.

    Samples missing from ``proximal`` (indexed like ``samples``) are fresh: log-ratio 0.
    """
    out = []
    for i, s in enumerate(samples):
        p = proximal.get(i)
        total = 0.0 if p is None else float(np.sum(np.subtract(p.completion_logprobs,
                                                               s.completion_logprobs)))
        out.append((total, len(s.completion_logprobs)))
    return out


def sample_weights(log_weights: Sequence[tuple[float, int]]) -> list[float]:
    """The untruncated per-sample weights exp(mean_t log-ratio)."""
    return [math.exp(min(total / max(n, 1), 50.0)) for total, n in log_weights]


def trajectory_weights(samples: Sequence[Sample], log_weights: Sequence[tuple[float, int]],
                       max_weight: float) -> dict[str, float]:
    """w_i per trajectory: exp of the mean token log-ratio over its samples, truncated."""
    sums: dict[str, list[float]] = {}
    for s, (total, n) in zip(samples, log_weights, strict=True):
        acc = sums.setdefault(s.traj_id, [0.0, 0.0])
        acc[0] += total
        acc[1] += n
    return {t: min(math.exp(min(total / max(n, 1.0), 50.0)), max_weight)
            for t, (total, n) in sums.items()}


def score_grad_sq_norms(learner: Learner, samples: Sequence[Sample], *, temperature: float,
                        max_tokens: int) -> dict[str, float]:
    """‖∇_θ Σ_t log π_θ(y_t)‖² per trajectory (its samples' completion tokens), exactly.

    One backward pass per trajectory on the learner's current weights; gradients are left
    cleared. Costs about one extra update epoch.
    """
    from agentgym.trainers.batching import micro_batches
    from agentgym.trainers.loss import token_logprobs

    by_traj: dict[str, list[Sample]] = {}
    for s in samples:
        by_traj.setdefault(s.traj_id, []).append(s)
    params = learner.parameters()
    out: dict[str, float] = {}
    learner.model.eval()  # no dropout: the score of the policy that samples
    for traj_id, own in by_traj.items():
        learner.optimizer.zero_grad(set_to_none=True)
        for mb in micro_batches(own, max_tokens, learner.pad_token_id):
            mb = mb.to(learner.device)
            logp, _ = token_logprobs(learner.model, mb.input_ids, mb.attention_mask,
                                     temperature, mask=mb.loss_mask)
            (logp * mb.loss_mask).sum().backward()
        out[traj_id] = float(sum(float(p.grad.double().square().sum())
                                 for p in params if p.grad is not None))
    learner.optimizer.zero_grad(set_to_none=True)
    return out


def baseline_advantages(samples: Sequence[Sample], rewards: Mapping[str, float],
                        weights: Mapping[str, float], grad_sq_norms: Mapping[str, float]
                        ) -> tuple[list[Sample], dict[str, float]]:
    """Every sample's advantage set to R_i − b*_group of its trajectory.

    Args:
        samples: The step's samples (several per trajectory).
        rewards: R_i by trajectory id.
        weights: w_i by trajectory id (1 for fresh ones).
        grad_sq_norms: ‖g_i‖² by trajectory id.

    Returns:
        The samples and the mean |b* − mean_group R| (how far OPOB moved the baseline).
    """
    groups: dict[str, list[str]] = {}
    for s in samples:
        members = groups.setdefault(s.group_id, [])
        if s.traj_id not in members:
            members.append(s.traj_id)
    baselines, shifts = {}, []
    for group_id, members in groups.items():
        r = [rewards[t] for t in members]
        baselines[group_id] = opob_baseline(r, [weights.get(t, 1.0) for t in members],
                                            [grad_sq_norms[t] for t in members])
        shifts.append(abs(baselines[group_id] - float(np.mean(r))))
    out = [replace(s, advantage=rewards[s.traj_id] - baselines[s.group_id]) for s in samples]
    return out, {"vcpo/baseline_shift": float(np.mean(shifts)) if shifts else 0.0}


def apply_vcpo(learner: Learner, samples: Sequence[Sample], proximal: Mapping[int, Sample],
               rewards: Mapping[str, float], config: VCPOConfig, *, max_weight: float,
               temperature: float, max_tokens: int
               ) -> tuple[list[Sample], float, dict[str, float]]:
    """The OPOB advantages (when ``config.baseline``) and the learning-rate scale of a step.

    Args:
        learner: The trained model (for ‖g_i‖²) on its current weights.
        samples: The step's samples with behaviour log-probs μ.
        proximal: The stale ones (by index into ``samples``) with π_prox log-probs.
        rewards: R_i by trajectory id.
        config: VCPO settings.
        max_weight: The importance-weight cap of the loss (truncates w_i in b*).
        temperature: The sampling temperature (scores tokens as sampled).
        max_tokens: Padded tokens per forward pass.

    Returns:
        The samples (advantages replaced when the baseline is on), η_eff / η, and the
        metrics ``vcpo/ess``, ``vcpo/ess_ratio``, ``vcpo/lr_scale`` (and
        ``vcpo/baseline_shift``).
    """
    logs = sample_log_weights(samples, proximal)
    ess = effective_sample_size(sample_weights(logs))
    ratio = ess / len(samples) if samples else 1.0
    scale = lr_scale(ratio, config)
    metrics = {"vcpo/ess": ess, "vcpo/ess_ratio": ratio, "vcpo/lr_scale": scale}
    out = list(samples)
    if config.baseline and out:
        norms = score_grad_sq_norms(learner, out, temperature=temperature,
                                    max_tokens=max_tokens)
        out, extra = baseline_advantages(out, rewards,
                                         trajectory_weights(out, logs, max_weight), norms)
        metrics.update(extra)
    return out, scale, metrics
