r"""GiGPO advantages: a GRPO episode term plus a step term from repeated (anchor) states.

    A_{i,t} = A^E_i + ω·A^S_{i,t} − λ·1[¬valid_t]
    A^E_i     = (R_i − mean_E R) / (std_E R + ε)              episode term, over entries E
    A^S_{i,t} = (G_{i,t} − mean_C G) / (std_C G + ε)          step term, over the cluster C
                C = every step of the group whose state_key equals s_{i,t}
    G_{i,t}   = Σ_k γ^k r_{i,t+k} − λ·1[¬valid_t]             penalized return-to-go
    (``mean_norm`` drops both divisions.)

Paper: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
arXiv 2505.10978 (code: verl-agent, ``gigpo/core_gigpo.py``).

Choices the paper leaves open, and what we do:

- **Episode statistics** (``episode_stats``): ``trajectory`` (default, the paper) puts one
  entry per scorable trajectory in E; ``step`` puts one entry per step record (R_i repeated
  T_i times), so long trajectories weigh more, as verl-agent's default does. In ``step`` a
  trajectory with no steps adds no entry.
- **Step clusters**: exact ``state_key`` equality within one group, across trajectories and
  time indices; a trajectory that loops puts several steps in one cluster. A cluster of one
  step (and every step whose ``state_key`` is ``None``) gets A^S = 0. Similarity clustering
  of noisy text states is not implemented.
- **Std**: unbiased (n − 1) for both terms, as ``torch.std`` in verl-agent; ε = 1e-6 added.
  One ``mode`` governs both terms, as in verl-agent.
- **Return-to-go**: from step rewards (``None`` = 0), γ = 0.95 by default (the released
  scripts), no bootstrap on truncation. An env that reports only a separate outcome reward
  and no step rewards gives G = 0 everywhere, hence A^S = 0.
- **Invalid-action penalty** λ: the spec's step-local rule. It enters the invalid step's
  own return, inside its cluster's statistics, and is taken once from its episode term
  after normalization (see ``base``). verl-agent also leaves earlier returns untouched: it
  subtracts λ from the invalid step's own return after discounting, but before the episode
  and step statistics, so λ shifts the group means by λ × the invalid share there.
- **Unscorable and small groups**: error trajectories enter no statistic and get no entry;
  a group with fewer than 2 scorable trajectories gives zeros.

With all states unique, A^S = 0 and GiGPO(``episode_stats="trajectory"``) equals GRPO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentgym.errors import ConfigError
from agentgym.trainers.advantages.base import (
    Advantages,
    EstimatorOptions,
    Flat,
    flatten,
    normalize,
    register_estimator,
    unflatten,
)
from agentgym.types import Group

EpisodeStats = Literal["trajectory", "step"]


@dataclass(frozen=True)
class GiGPOOptions(EstimatorOptions):
    """GiGPO options: the shared ones plus ``episode_stats`` and ``step_weight``."""

    gamma: float = 0.95
    """Discount γ of the step term's return-to-go, in [0, 1] (0.95 in the released scripts)."""
    episode_stats: EpisodeStats = "trajectory"
    """Entries of the episode statistics: one per ``trajectory`` (paper) or per ``step``."""
    step_weight: float = 1.0
    """ω ≥ 0, the weight of the step term (0 = GRPO's episode term alone)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.step_weight) and self.step_weight >= 0):
            raise ConfigError(f"step_weight must be a finite number >= 0, got "
                              f"{self.step_weight}; the paper uses step_weight=1.0")


def episode_term(flat: Flat, mode: str, episode_stats: str) -> np.ndarray:
    """``(S,)`` A^E for every step, from trajectory or step entries (unbiased std)."""
    if episode_stats == "trajectory":
        per_traj = normalize(flat.outcome, flat.group, mode=mode, ddof=1)  # (N,)
        return per_traj[flat.step_traj]  # (S,)
    entries = flat.outcome[flat.step_traj]  # (S,) R_i once per step record
    return normalize(entries, flat.group[flat.step_traj], mode=mode, ddof=1)  # (S,)


def state_clusters(flat: Flat) -> np.ndarray:
    """``(S,)`` dense cluster ids: equal ``(group, state_key)``; ``None`` keys are singletons."""
    ids: dict[tuple[object, object], int] = {}
    step_group = flat.group[flat.step_traj].tolist()  # (S,) group of each step
    return np.fromiter(
        (ids.setdefault((g, s.state_key) if s.state_key is not None else (None, k), len(ids))
         for k, (g, s) in enumerate(zip(step_group, flat.steps, strict=True))),
        dtype=np.int64, count=len(flat.steps))


def step_term(flat: Flat, mode: str) -> np.ndarray:
    """``(S,)`` A^S: G_t normalized within its anchor-state cluster (0 for singletons)."""
    return normalize(flat.returns, state_clusters(flat), mode=mode, ddof=1)


@register_estimator("gigpo", options=GiGPOOptions)
class GiGPO:
    """GiGPO advantages (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("gigpo", episode_stats="step", step_weight=0.5)
    """

    def __init__(self, options: GiGPOOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"GiGPO({self.options})"

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Advantages of every scorable trajectory in ``groups``, one per step."""
        o = self.options
        flat = flatten(groups, gamma=o.gamma, invalid_penalty=o.invalid_penalty)
        episode = episode_term(flat, o.mode, o.episode_stats)  # (S,) A^E_i on each step
        step = step_term(flat, o.mode)  # (S,) A^S_{i,t}
        # λ once from the invalid step's episode term (it is already inside its own G_t)
        return unflatten(flat, episode + o.step_weight * step - flat.penalty)
