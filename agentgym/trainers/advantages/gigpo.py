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
  step (and every step whose ``state_key`` is ``None``) gets A^S = 0. With
  ``similarity_threshold`` (the paper's variant for noisy text states) steps cluster by the
  ``difflib`` similarity of their state keys instead (greedy, in step order); that compares
  the keys themselves, so it helps where an env's key is the observation text, not a hash.
- **Std**: unbiased (n − 1) for both terms, as ``torch.std`` in verl-agent; ε = 1e-6 added.
  One ``mode`` governs both terms, as in verl-agent.
- **Return-to-go**: from step rewards (``None`` = 0), γ = 0.95 by default (the released
  scripts), no bootstrap on truncation. An env that reports only a separate outcome reward
  and no step rewards gives G = 0 everywhere, hence A^S = 0.
- **Invalid-action penalty** λ: the spec's step-local rule. It enters the invalid step's
  own return, inside its cluster's statistics, and is taken once from its episode term
  after normalization (see ``base``). verl-agent also leaves earlier returns untouched: it
  subtracts λ from the invalid step's own return after discounting, but before the episode
  and step statistics, so λ shifts the group means by λ × the invalid share there;
  ``penalty_placement="before_stats"`` reproduces that (with ``episode_stats="step"``,
  verl-agent's ``compute_mean_std_cross_steps``).
- **Unscorable and small groups**: error trajectories enter no statistic and get no entry;
  a group with fewer than 2 scorable trajectories gives zeros.

With all states unique, A^S = 0 and GiGPO(``episode_stats="trajectory"``) equals GRPO.
"""

from __future__ import annotations

import difflib
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
    PenaltyPlacement,
    flatten,
    normalize,
    register_estimator,
    step_entry_advantages,
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
    similarity_threshold: float | None = None
    """None: anchor states match by exact ``state_key``. A value in (0, 1): the paper's
    similarity grouping (verl-agent's ``enable_similarity``/``similarity_thresh``, 0.95 there):
    a step joins the first cluster of its group whose first state key has a ``difflib``
    ratio ≥ the threshold to its own."""
    penalty_placement: PenaltyPlacement = "own"
    """``own``: λ taken from the invalid step's episode term after the statistics (spec);
    ``before_stats``: inside that step's episode entry R_i − λ, as verl-agent."""

    def __post_init__(self) -> None:
        super().__post_init__()
        t = self.similarity_threshold
        if t is not None and not 0.0 < t < 1.0:
            raise ConfigError(f"similarity_threshold must be in (0, 1) or none, got {t}; the "
                              "paper uses 0.95, and none keeps exact state matching")
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


def similar_clusters(flat: Flat, threshold: float) -> np.ndarray:
    """``(S,)`` dense cluster ids by similarity of the state keys.

    In step order, each step joins the first cluster of its group whose first state key
    ``rep`` has ``SequenceMatcher(None, key, rep).ratio() >= threshold``, else starts one
    (greedy, as the paper's released code); ``None`` keys are singletons. A key seen before
    in its group reuses its cluster: the scan would find the same one.
    """
    out = np.empty(len(flat.steps), dtype=np.int64)
    # group -> [(matcher holding rep as its second sequence, cluster id)]: difflib caches
    # its work on the second sequence, so each representative is indexed once
    reps: dict[int, list[tuple[difflib.SequenceMatcher, int]]] = {}
    known: dict[tuple[int, str], int] = {}  # (group, key) -> cluster id
    n = 0
    for k, (g, step) in enumerate(zip(flat.group[flat.step_traj].tolist(), flat.steps,
                                      strict=True)):
        key = step.state_key
        if key is None:
            out[k], n = n, n + 1
            continue
        if (g, key) not in known:
            for matcher, cid in reps.setdefault(g, []):
                matcher.set_seq1(key)
                if matcher.ratio() >= threshold:
                    known[(g, key)] = cid
                    break
            else:
                known[(g, key)], n = n, n + 1
                reps[g].append((difflib.SequenceMatcher(None, "", key), n - 1))
        out[k] = known[(g, key)]
    return out


def state_clusters(flat: Flat, similarity_threshold: float | None = None) -> np.ndarray:
    """``(S,)`` dense cluster ids: equal ``(group, state_key)``; ``None`` keys are singletons.

    With ``similarity_threshold`` the ids come from :func:`similar_clusters`.
    """
    if similarity_threshold is not None:
        return similar_clusters(flat, similarity_threshold)
    ids: dict[tuple[object, object], int] = {}
    step_group = flat.group[flat.step_traj].tolist()  # (S,) group of each step
    return np.fromiter(
        (ids.setdefault((g, s.state_key) if s.state_key is not None else (None, k), len(ids))
         for k, (g, s) in enumerate(zip(step_group, flat.steps, strict=True))),
        dtype=np.int64, count=len(flat.steps))


def step_term(flat: Flat, mode: str, similarity_threshold: float | None = None) -> np.ndarray:
    """``(S,)`` A^S: G_t normalized within its anchor-state cluster (0 for singletons)."""
    return normalize(flat.returns, state_clusters(flat, similarity_threshold), mode=mode,
                     ddof=1)


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
        step = step_term(flat, o.mode, o.similarity_threshold)  # (S,) A^S_{i,t}
        if o.penalty_placement == "before_stats":  # verl-agent: λ inside the episode entries
            episode = step_entry_advantages(flat, o.mode, cross_steps=o.episode_stats == "step",
                                            placement="before_stats")  # (S,)
            return unflatten(flat, episode + o.step_weight * step)
        episode = episode_term(flat, o.mode, o.episode_stats)  # (S,) A^E_i on each step
        # λ once from the invalid step's episode term (it is already inside its own G_t)
        return unflatten(flat, episode + o.step_weight * step - flat.penalty)
