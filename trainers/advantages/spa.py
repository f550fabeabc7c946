r"""SPA advantages: dense step rewards from progress contributions, return-to-go, batch whitening.

    r_t = α·ĉ_t + β·g_t − λ·1[¬valid_t]·(in G_t only)     g_t = 1[valid_t]
    G_t = Σ_k γ^k r_{t+k}                                   return-to-go, no bootstrap
    A_t = (G_t − mean_B G) / (std_B G + ε)                  B = every step of the batch
    (``mean_norm`` drops the division.)

Paper: Wang et al. 2025, "SPA-RL: Reinforcing LLM Agents via Stepwise Progress Attribution",
arXiv 2505.20732 (credit-assignment spec §5). ĉ_t is the progress estimator's contribution
of step t (``agentgym.trainers.progress``), read from ``step.result.info["progress"]``:
``agentgym train`` writes it before calling this estimator, and ``agentgym progress score
--out`` writes it into a JSONL file for ``agentgym advantages --estimator spa``.

Choices, and what we do:

- **Defaults**: α = 1, β = 0.5, γ = 0.99 (the spec); g_t is the step's ``valid`` flag.
- **Invalid-action penalty** λ defaults to 0 here: β·g_t already rewards valid actions, and
  a second penalty would count the same event twice. When set, it is step-local (spec §0).
- **Whitening** is over every step of every scorable trajectory of the batch, not per
  group: SPA has no group baseline, so the estimator gives a lone rollout values too; the
  training loop (``trainers.loop``) still drops groups with fewer than 2 scorable rollouts
  for every estimator, so such a rollout does not train there. Std is the
  unbiased one (n − 1, as verl's ``masked_whiten``) plus ε = 1e-6; a batch of fewer than 2
  steps gives zeros.
- **Outcome reward** does not enter r_t: it reaches the policy only through ĉ (Σ_t ĉ_t ≈ R
  is what the estimator is trained for). The env's own step rewards are ignored too.
- PPO with a value head and GAE (the paper's other option) is not implemented.
- **Released-code ablation** (``variant="released"``): the public code overwrites every
  ĉ_t of trajectory i with the leave-one-out outcome advantage c_i = R_i − mean_{j≠i} R_j
  (R_i when alone in its group) and weights step k of n by (n − 1 − k). We take the step
  value v_k = (n − 1 − k)·c_i + β·g_k − λ·1[¬valid_k] and whiten it over the batch (no
  further return-to-go: the weighting plays that part). The released trainer is public
  (SPA-RL-Agent, ``ppo/step_ppotrainer.py``) and its ablation weights the whole step score,
  not only the progress term; this variant weights c_i alone and is not yet matched to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages.base import (
    EPS,
    Advantages,
    EstimatorOptions,
    outcome_score,
    register_estimator,
    returns_to_go,
)
from agentgym.types import Group, Trajectory

PROGRESS_KEY = "progress"
"""``step.result.info`` key holding the progress estimator's contribution ĉ_t."""
Variant = Literal["paper", "released"]


@dataclass(frozen=True)
class SPAOptions(EstimatorOptions):
    """SPA options: the shared ones plus ``alpha``, ``beta`` and ``variant``."""

    gamma: float = 0.99
    """Discount γ of the return-to-go over the dense step rewards, in [0, 1]."""
    invalid_penalty: float = 0.0
    """λ ≥ 0; 0 by default because β·g_t already rewards valid actions."""
    alpha: float = 1.0
    """α, the weight of the progress contribution ĉ_t."""
    beta: float = 0.5
    """β, the weight of the grounding signal g_t = 1[valid_t]."""
    variant: Variant = "paper"
    """``paper`` (ĉ from the estimator) or ``released`` (leave-one-out ablation, docstring)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("alpha", "beta"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name} must be a finite number, got {getattr(self, name)}")


def contributions(traj: Trajectory) -> np.ndarray:
    """``(T,)`` ĉ_t from ``info["progress"]``; raises SchemaError naming how to get them."""
    out = []
    for s in traj.steps:
        value = s.result.info.get(PROGRESS_KEY)
        if value is None:
            raise SchemaError(
                f"trajectory {traj.id!r} step {s.index} has no info[{PROGRESS_KEY!r}]; spa "
                "reads the progress estimator's contributions: score the file with 'agentgym "
                "progress score --estimator DIR FILE --out SCORED' (or train with "
                "algorithm.estimator=spa, which writes them)")
        out.append(float(value))
    return np.asarray(out, dtype=np.float64)


def step_rewards(traj: Trajectory, alpha: float, beta: float) -> np.ndarray:
    """``(T,)`` r_t = α·ĉ_t + β·g_t."""
    valid = np.fromiter((s.valid for s in traj.steps), bool, len(traj.steps))
    return alpha * contributions(traj) + beta * valid.astype(np.float64)


def _loo(group: Group) -> dict[str, float]:
    """Leave-one-out outcome advantage R_i − mean_{j≠i} R_j per scorable trajectory."""
    scores = {t.id: outcome_score(t) for t in group.scorable}
    total, n = sum(scores.values()), len(scores)
    return {i: r - (total - r) / (n - 1) if n > 1 else r for i, r in scores.items()}


@register_estimator("spa", options=SPAOptions, group_baseline=False,
                    needs=("progress_model",))
class SPA:
    """SPA advantages (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("spa", gamma=0.99, beta=0.5)
    """

    def __init__(self, options: SPAOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"SPA({self.options})"

    def values(self, groups: Sequence[Group]) -> dict[str, np.ndarray]:
        """Per-step values before whitening: G_t (paper) or v_k (released)."""
        o = self.options
        out: dict[str, np.ndarray] = {}
        for group in groups:
            loo = _loo(group) if o.variant == "released" else {}
            for traj in group.scorable:
                if traj.id in out:
                    raise SchemaError(f"trajectory ids must be unique across groups; "
                                      f"repeated: {traj.id!r}")
                n = len(traj.steps)
                valid = np.fromiter((s.valid for s in traj.steps), bool, n)
                penalty = o.invalid_penalty * (~valid)  # (T,) step-local λ
                if o.variant == "released":
                    weight = np.arange(n - 1, -1, -1, dtype=np.float64)  # (T,) n−1−k
                    out[traj.id] = weight * loo[traj.id] + o.beta * valid - penalty
                else:
                    rewards = step_rewards(traj, o.alpha, o.beta)  # (T,) r_t
                    out[traj.id] = returns_to_go(rewards, o.gamma) - penalty
        return out

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Advantages of every scorable trajectory in ``groups``, one per step."""
        values = self.values(groups)
        flat = np.concatenate(list(values.values())) if values else np.zeros(0)  # (S,)
        if len(flat) < 2:
            return {i: np.zeros_like(v) for i, v in values.items()}
        dev = flat - flat.mean()
        if self.options.mode == "mean_std_norm":
            dev = dev / (flat.std(ddof=1) + EPS)
        parts = np.split(dev, np.cumsum([len(v) for v in values.values()])[:-1])
        return {i: p.astype(np.float64, copy=True) for i, p in zip(values, parts, strict=True)}
