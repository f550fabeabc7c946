r"""HGPO advantages: returns-to-go normalized in a hierarchy of groups by matching history.

    A_{i,t}   = Σ_k w_k·A^k_{i,t} / (Σ_k w_k + ε),   over the pairs (k, A^k) with A^k ≠ 0
    A^k_{i,t} = (G_{i,t} − mean_{C_k} G) / (std_{C_k} G + ε)       population std (n)
    C_k       = the group's steps whose last k state keys equal (s_{t−k+1}, …, s_{i,t}),
                k = 1 … min(K + 1, t + 1)
    w_k       = (k + offset)^α                                     α = 1, offset = 1
    G_{i,t}   = Σ_j γ^j r_{i,t+j} − λ·1[¬valid_t]                  penalized return-to-go
    (``mean_norm`` drops the division; no pair left → 0.)

Paper: "Hierarchy-of-Groups Policy Optimization" (HGPO), arXiv 2602.22817. It fixes a bias of
GiGPO (arXiv 2505.10978): steps that share a current state can sit under different history
windows in the prompt, so one anchor-state baseline mixes different contexts. HGPO groups
steps by how much of the last K states match, and weights deeper (more alike) levels more.

Choices the paper leaves open, and what we do (credit-assignment spec §3):

- **K** (``history_length``): the window the prompts were built with. ``None`` (default)
  reads it from the trajectories, where the rollout engine records
  ``metrics["history_length"]`` for a window context; a run with full history records none,
  and then K must be given (ConfigError). An explicit option wins over the recorded value,
  so recorded data can be re-scored with another K; trajectories recording different Ks
  are an error. K = 0 leaves level 1 alone: GiGPO's step term with the population std.
- **Levels**: exact equality of the last k ``state_key``s (not actions, not t), within one
  group, across trajectories and time indices; early steps have fewer levels (no padding);
  a ``None`` key matches nothing, nor does any suffix holding it.
- **Std**: population (n), as the released code; ε = 1e-6 is added to it and to Σ w_k.
- **Aggregation**: pairs whose A^k is exactly 0 are dropped (so are groups of one, which give
  0), as in the released code; ``weight_offset=0`` gives the paper-figure weights k^α.
  The drop makes A discontinuous in rounding (a pair worth 1e-17 stays and adds its weight
  to the denominator), so each level's statistics are summed in a canonical order (sorted
  by value within the group): the result is then bit-for-bit independent of the order of
  trajectories and groups. The reference code keeps no such care: its float32 sums turn
  the rounding of identical returns into spurious advantages (−0.49 on six identical
  returns); agentgym's exact zeros there are deliberate.
- **Episode term**: none by default. ``base_group=True`` adds a pair of weight 1 holding
  GiGPO's episode advantage with per-step statistics (one entry per step record, unbiased
  std), less λ on an invalid step (GiGPO's placement); it is dropped when exactly 0 too.
- **Invalid-action penalty** λ: in the step's own G_t only (spec §0), so it reaches the
  level statistics of that step; without ``base_group`` it is not subtracted again.
- **Order**: suffix keys need each trajectory's steps in order; step ``index``es that do
  not increase raise SchemaError. Compute before any padding, duplication or reordering.
- **Unscorable and small groups**: error trajectories enter no statistic and get no entry;
  a group with fewer than 2 scorable trajectories gives zeros.

Parity: ``tests/trainers/test_verl_agent_parity.py`` holds these defaults (K 0 to 3, both
modes, α, ``base_group``) to numbers recorded from the HGPO recipe's own
``compute_hgpo_outcome_advantage``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages.base import (
    EPS,
    Advantages,
    EstimatorOptions,
    Flat,
    flatten,
    normalize,
    register_estimator,
    unflatten,
)
from agentgym.types import Group

HISTORY_METRIC = "history_length"
"""``Trajectory.metrics`` key where the rollout engine records K for a window context."""


@dataclass(frozen=True)
class HGPOOptions(EstimatorOptions):
    """HGPO options: the shared ones plus K, the level weights and the episode level."""

    gamma: float = 0.95
    """Discount γ of the return-to-go, in [0, 1] (0.95 in the released scripts)."""
    history_length: int | None = None
    """K >= 0, states of history in the prompt; None = read ``metrics["history_length"]``."""
    alpha: float = 1.0
    """α >= 0 in the level weight w_k = (k + weight_offset)^α (0 = equal weights)."""
    weight_offset: float = 1.0
    """offset >= 0 in w_k (1 = released code, 0 = the paper's figure)."""
    base_group: bool = False
    """Add GiGPO's episode advantage (per-step statistics) as one more pair of weight 1."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.history_length is not None and self.history_length < 0:
            raise ConfigError(f"history_length must be an integer >= 0 (the context window K) "
                              f"or None, got {self.history_length}")
        for name in ("alpha", "weight_offset"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {value}; the "
                                  f"released code uses alpha=1.0, weight_offset=1.0")


def history_length(groups: Sequence[Group], option: int | None) -> int:
    """K: the option if given, else the one value the scorable trajectories recorded.

    Raises:
        ConfigError: Neither gives K (a full-history run), or the trajectories disagree.
    """
    if option is not None:
        return option
    found = {t.metrics.get(HISTORY_METRIC) for g in groups for t in g.scorable}
    if found == {None}:
        raise ConfigError(
            "hgpo needs K, the history window the prompts were built with, and no trajectory "
            f"records it in metrics[{HISTORY_METRIC!r}] (rolled out with full history, or "
            "read from the minimal form?); set the option history_length, e.g. "
            "algorithm.options.history_length=2 or --set history_length=2, or roll out with "
            "rollout.context=window")
    values = sorted(float(v) for v in found if v is not None)
    if len(found) > 1 or not (float(values[0]).is_integer() and float(values[0]) >= 0):
        raise ConfigError(f"trajectories record different or invalid history windows "
                          f"(metrics[{HISTORY_METRIC!r}]: {sorted(map(str, found))}); "
                          "score each window separately or set history_length explicitly")
    return int(values[0])


def positions(flat: Flat) -> np.ndarray:
    """``(S,)`` t of each step within its trajectory; raises unless step indices increase."""
    starts = np.cumsum(flat.lengths) - flat.lengths  # (N,) first step of each trajectory
    pos = np.arange(len(flat.steps)) - starts[flat.step_traj]  # (S,)
    index = np.fromiter((s.index for s in flat.steps), np.int64, len(flat.steps))  # (S,)
    bad = np.flatnonzero((pos > 0) & (index <= np.roll(index, 1)))
    if len(bad):
        raise SchemaError(f"trajectory {flat.ids[flat.step_traj[bad[0]]]!r} has its steps out "
                          f"of order (step index {index[bad[0]]} after {index[bad[0] - 1]}); "
                          "history-based advantages need each trajectory's steps in order")
    return pos


def state_ids(flat: Flat) -> np.ndarray:
    """``(S,)`` dense ids of ``(group, state_key)``; each ``None`` key gets its own id."""
    ids: dict[tuple[object, object], int] = {}
    step_group = flat.group[flat.step_traj].tolist()  # (S,)
    return np.fromiter(
        (ids.setdefault((g, s.state_key) if s.state_key is not None else (None, k), len(ids))
         for k, (g, s) in enumerate(zip(step_group, flat.steps, strict=True))),
        dtype=np.int64, count=len(flat.steps))


def pair_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n,)`` dense ids of the pairs ``(a_j, b_j)`` of non-negative ints."""
    if len(a) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(a * (int(b.max()) + 1) + b, return_inverse=True)[1].reshape(-1)


def canonical_normalize(values: np.ndarray, labels: np.ndarray, *, mode: str,
                        ddof: int) -> np.ndarray:
    """``normalize`` with each label's members summed in sorted order (order-independent)."""
    order = np.lexsort((values, labels))  # (n,) by label, then value
    out = np.empty_like(values)
    out[order] = normalize(values[order], labels[order], mode=mode, ddof=ddof)
    return out


def hgpo_step_advantages(flat: Flat, options: HGPOOptions, k_max: int) -> np.ndarray:
    """``(S,)`` HGPO advantages of the flattened steps (module docstring).

    Args:
        flat: The flattened groups (``base.flatten``, with HGPO's γ and λ).
        options: The estimator options.
        k_max: K, the history window; levels run k = 1 … K + 1.

    Returns:
        One advantage per step; groups with < 2 scorable trajectories are zeroed later.
    """
    pos, state = positions(flat), state_ids(flat)  # (S,), (S,)
    num, den = np.zeros(len(state)), np.zeros(len(state))  # (S,) Σ w·A, Σ w over kept pairs
    idx, label = np.arange(len(state)), state  # level 1: the current state alone
    for k in range(1, k_max + 2):
        if k > 1:  # level k: extend each level-(k−1) suffix by the state k − 1 steps back
            keep = pos[idx] >= k - 1
            idx = idx[keep]
            label = pair_ids(label[keep], state[idx - (k - 1)])
        if len(idx) == 0:
            break
        a = canonical_normalize(flat.returns[idx], label, mode=options.mode, ddof=0)
        w = (k + options.weight_offset) ** options.alpha
        num[idx] += w * a
        den[idx] += np.where(a != 0, w, 0.0)  # exact zeros (and groups of one) are dropped
    if options.base_group:
        entries = flat.outcome[flat.step_traj]  # (S,) R_i once per step record
        a = canonical_normalize(entries, flat.group[flat.step_traj], mode=options.mode,
                                ddof=1) - flat.penalty
        num += a
        den += np.where(a != 0, 1.0, 0.0)
    return num / (den + EPS)


@register_estimator("hgpo", options=HGPOOptions, needs=("history_length",))
class HGPO:
    """HGPO advantages (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("hgpo", history_length=2, base_group=True)
        >>> estimate([])
        {}
    """

    def __init__(self, options: HGPOOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"HGPO({self.options})"

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Advantages of every scorable trajectory in ``groups``, one per step.

        Raises:
            ConfigError: K is neither an option nor recorded by the trajectories.
            SchemaError: A trajectory's steps are out of order, or ids repeat.
        """
        o = self.options
        if not any(g.scorable for g in groups):
            return {}
        k_max = history_length(groups, o.history_length)
        flat = flatten(groups, gamma=o.gamma, invalid_penalty=o.invalid_penalty)
        return unflatten(flat, hgpo_step_advantages(flat, o, k_max))
