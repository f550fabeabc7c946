r"""RLOO advantages: each trajectory's baseline is the mean score of the others in its group.

    A_i = R_i − (1 / (n − 1)) · Σ_{j≠i} R_j          (mode="mean_norm", the default)
    A_i = that / (std_j R_j + ε)                     (mode="mean_std_norm")
    A_{i,t} = A_i − λ·1[¬valid_t]                    for every step t of trajectory i

Papers: Kool, van Hoof and Welling 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!"
(ICLR DeepRL workshop); Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style
Optimization for Learning from Human Feedback in LLMs", arXiv 2402.14740.

Choices the papers leave open, and what we do:

- **Multi-turn**: n runs over the group's scorable trajectories, one entry each; every step
  of trajectory i gets A_i (spec §1).
- **Mode**: RLOO is defined without a std; ``mean_norm`` (the default here) is the paper.
  ``mean_std_norm`` also divides by the group's unbiased std + ε (as TRL's optional
  advantage whitening does per group). Note R_i − mean_{j≠i} R_j = n/(n−1)·(R_i − mean_j R_j),
  so RLOO is GRPO's ``mean_norm`` scaled by n/(n−1).
- **Unscorable and small groups**: error trajectories get no entry and are not among the
  "others"; with fewer than 2 scorable trajectories there is no "other", so zeros.
- **Invalid-action penalty** (not in the papers): λ is taken from the invalid step's own
  advantage, reaching neither the other steps nor anyone's baseline (see ``base``).
- ``gamma`` is accepted (one config serves every estimator) and unused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.trainers.advantages.base import (
    Advantages,
    Flat,
    Mode,
    OutcomeOptions,
    normalize,
    outcome_advantages,
    register_estimator,
)
from agentgym.types import Group


@dataclass(frozen=True)
class RLOOOptions(OutcomeOptions):
    """RLOO takes the shared options; its ``mode`` defaults to ``mean_norm`` (the paper)."""

    mode: Mode = "mean_norm"
    """``mean_norm``: R_i − mean of the others (the paper); ``mean_std_norm``: also / std."""


def rloo_trajectory_advantages(flat: Flat, mode: str) -> np.ndarray:
    """``(N,)`` leave-one-out advantages, one per scorable trajectory (0 in groups of < 2).

    Args:
        flat: The flattened groups (``base.flatten``).
        mode: ``mean_norm`` or ``mean_std_norm``.

    Returns:
        One advantage per scorable trajectory, before the invalid-step penalty.
    """
    n = np.bincount(flat.group)[flat.group]  # (N,) group size of each trajectory
    # R_i − mean_{j≠i} R_j = n/(n−1)·(R_i − mean_j R_j): the same number, computed through
    # the shared normalize() so that equal scores give exactly 0.
    scale = n / np.maximum(n - 1, 1)  # (N,)
    return scale * normalize(flat.outcome, flat.group, mode=mode, ddof=1)  # (N,)


@register_estimator("rloo", options=RLOOOptions, level="trajectory")
class RLOO:
    """RLOO advantages (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("rloo")
    """

    def __init__(self, options: RLOOOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"RLOO({self.options})"

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Advantages of every scorable trajectory in ``groups``, one per step."""
        return outcome_advantages(groups, self.options, rloo_trajectory_advantages,
                                  leave_one_out=True)
