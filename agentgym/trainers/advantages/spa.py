r"""SPA advantages: dense step rewards from progress contributions, return-to-go or GAE, whitened.

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
- **Advantage** (``advantage``): ``return_to_go`` (default, above) or ``gae``, the paper's
  PPO form: the same dense rewards against a learned value head, A_t = GAE(γ, λ) whitened
  over the batch (:mod:`agentgym.trainers.advantages.gae`; ``lam`` = λ, default 0.95; the
  trainer builds the value head, ``algorithm.value``). λ_inv comes off the step's own
  advantage after whitening there.
- **Released-code variant** (``variant="released"``), the public trainer (SPA-RL-Agent:
  ``prm/rl_data_org.py`` builds the step scores, ``ppo/step_ppotrainer.py`` trains them):

      c_i = R_i − mean_{j≠i} R_j   (R_i when alone)     the progress values are discarded
      s_k = α·c_i + β·g_k                                 the whole step score …
      r_k = (n − 1 − k)·s_k                               … weighted; the last step gets 0

  ``rl_data_org.py`` overwrites every progress value of trajectory i with c_i and adds the
  grounding 0.5 (β) when the next observation is not "Nothing happens" (always on the last
  step, which weighs 0 anyway); ``compute_rewards`` of ``step_ppotrainer.py`` puts
  s_k·(n − 1 − k) on the last token of step k; TRL's ``compute_advantages`` then runs GAE
  with the value head (TRL's defaults γ = 1, λ = 0.95: the run's config file is not
  published) and whitens with the unbiased variance, (A − μ)/sqrt(var + 1e-8), which this
  variant uses too. ``presets.spa_released()`` sets all of it (``advantage=gae``). Left
  out: the trainer's per-token GAE over the whole multi-turn sequence (its γλ decay also
  runs over the observation tokens between steps; agentgym's time index is the step) and
  its KL penalty inside the reward (agentgym's KL is the loss's ``kl_coef``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages.base import (
    Advantages,
    EstimatorOptions,
    outcome_score,
    register_estimator,
    returns_to_go,
)
from agentgym.trainers.advantages.gae import gae_of, penalized, whiten
from agentgym.types import Group, Trajectory

PROGRESS_KEY = "progress"
"""``step.result.info`` key holding the progress estimator's contribution ĉ_t."""
Variant = Literal["paper", "released"]
AdvantageForm = Literal["return_to_go", "gae"]
RELEASED_VAR_EPS = 1e-8  # TRL's masked_whiten: rsqrt(var + 1e-8)


@dataclass(frozen=True)
class SPAOptions(EstimatorOptions):
    """SPA options: the shared ones plus alpha, beta, variant, advantage and lam."""

    gamma: float = 0.99
    """Discount γ of the return-to-go (or of GAE) over the dense step rewards, in [0, 1]."""
    invalid_penalty: float = 0.0
    """λ ≥ 0; 0 by default because β·g_t already rewards valid actions."""
    alpha: float = 1.0
    """α, the weight of the progress term (ĉ_t, or c_i in the released variant)."""
    beta: float = 0.5
    """β, the weight of the grounding signal g_t = 1[valid_t]."""
    variant: Variant = "paper"
    """``paper`` (ĉ from the estimator) or ``released`` (the public trainer, docstring)."""
    advantage: AdvantageForm = "return_to_go"
    """``return_to_go`` (whitened G_t) or ``gae`` (value head + GAE, whitened)."""
    lam: float = 0.95
    """GAE's λ in [0, 1] (``advantage=gae`` only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("alpha", "beta"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name} must be a finite number, got {getattr(self, name)}")
        if not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"lam must be in [0, 1], got {self.lam}; PPO's usual is 0.95")


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


def released_rewards(traj: Trajectory, loo: float, alpha: float, beta: float) -> np.ndarray:
    """``(T,)`` r_k = (n − 1 − k)·(α·c_i + β·g_k), the released trainer's step rewards."""
    n = len(traj.steps)
    valid = np.fromiter((s.valid for s in traj.steps), bool, n)
    weight = np.arange(n - 1, -1, -1, dtype=np.float64)  # (T,) n − 1 − k
    return weight * (alpha * loo + beta * valid.astype(np.float64))


def leave_one_out(group: Group) -> dict[str, float]:
    """c_i = R_i − mean_{j≠i} R_j per scorable trajectory (R_i when alone in its group)."""
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

    @property
    def uses_values(self) -> bool:
        """Whether the trainer must write V(s_t) into the steps (``advantage=gae``)."""
        return self.options.advantage == "gae"

    def rewards(self, groups: Sequence[Group]) -> dict[str, np.ndarray]:
        """Trajectory id -> ``(T,)`` dense step rewards r_t of the chosen variant."""
        o = self.options
        out: dict[str, np.ndarray] = {}
        for group in groups:
            loo = leave_one_out(group) if o.variant == "released" else {}
            for traj in group.scorable:
                if traj.id in out:
                    raise SchemaError(f"trajectory ids must be unique across groups; "
                                      f"repeated: {traj.id!r}")
                out[traj.id] = (released_rewards(traj, loo[traj.id], o.alpha, o.beta)
                                if o.variant == "released"
                                else step_rewards(traj, o.alpha, o.beta))
        return out

    def values(self, groups: Sequence[Group]) -> dict[str, np.ndarray]:
        """Per-step values before whitening: G_t − λ·1[¬valid_t], or GAE's A_t."""
        o = self.options
        rewards = self.rewards(groups)
        if o.advantage == "gae":
            return {i: a for i, (a, _) in
                    gae_of(groups, lambda t: rewards[t.id], o.gamma, o.lam).items()}
        out = {}
        for group in groups:
            for traj in group.scorable:
                invalid = np.fromiter((not s.valid for s in traj.steps), bool, len(traj.steps))
                out[traj.id] = (returns_to_go(rewards[traj.id], o.gamma)
                                - o.invalid_penalty * invalid)
        return out

    def returns(self, groups: Sequence[Group]) -> dict[str, np.ndarray]:
        """Trajectory id -> ``(T,)`` R̂_t = A_t + V(s_t), the value head's targets (GAE)."""
        o, rewards = self.options, self.rewards(groups)
        return {i: r for i, (_, r) in
                gae_of(groups, lambda t: rewards[t.id], o.gamma, o.lam).items()}

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Advantages of every scorable trajectory in ``groups``, one per step."""
        o, values = self.options, self.values(groups)
        if o.variant == "released" and o.mode == "mean_std_norm":
            out = _trl_whiten(values)
        else:
            out = whiten(values, o.mode)
        return penalized(out, groups, o.invalid_penalty) if o.advantage == "gae" else out


def _trl_whiten(values: dict[str, np.ndarray]) -> Advantages:
    """(x − μ)/sqrt(var + 1e-8), unbiased var over every step: the released trainer's form."""
    flat = np.concatenate(list(values.values())) if values else np.zeros(0)  # (S,)
    if len(flat) < 2:
        return {i: np.zeros_like(v) for i, v in values.items()}
    dev = (flat - flat.mean()) / math.sqrt(flat.var(ddof=1) + RELEASED_VAR_EPS)
    parts = np.split(dev, np.cumsum([len(v) for v in values.values()])[:-1])
    return {i: p.astype(np.float64, copy=True) for i, p in zip(values, parts, strict=True)}
