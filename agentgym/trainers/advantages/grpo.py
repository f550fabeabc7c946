r"""GRPO advantages: one normalized outcome score per trajectory, broadcast to its steps.

    A_i = (R_i − mean_j R_j) / (std_j R_j + ε)      (mode="mean_std_norm", the paper)
    A_i =  R_i − mean_j R_j                          (mode="mean_norm", Dr. GRPO)
    A_{i,t} = A_i − λ·1[¬valid_t]                    for every step t of trajectory i

Paper: Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
Language Models", arXiv 2402.03300, §4.1.2 (outcome supervision). ``mean_norm``: Liu et al.
2025, "Understanding R1-Zero-Like Training: A Critical Perspective" (Dr. GRPO), arXiv
2503.20783; its other change, dropping the 1/|o| length normalization, belongs to the loss.

Choices the paper leaves open, and what we do:

- **Std**: unbiased (n − 1), as ``torch.std`` in the reference trainers; ε = 1e-6 is added
  to the std (not under the square root).
- **Multi-turn**: the paper scores single completions. Here j runs over the group's scorable
  trajectories, one entry each (long trajectories do not weigh more), and every step of
  trajectory i gets A_i (spec §1).
- **Outcome score**: R_i = the outcome reward, else the sum of step rewards (``base``).
- **Unscorable and small groups**: error trajectories get no entry and are not in the mean
  or std; a group with fewer than 2 scorable trajectories gives zeros; a zero-variance group
  gives exact zeros (``normalize`` shifts by a member's score, so equal scores deviate by
  exactly 0 and rounding is never divided by ε).
- **Invalid-action penalty** (not in the paper): λ is taken from the invalid step's own
  advantage after normalization, so it reaches neither the other steps nor the baseline,
  and stays λ (not λ/ε) in a zero-variance group. See ``base`` for why.
- ``gamma`` is accepted (one config serves every estimator) and unused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.trainers.advantages.base import (
    Advantages,
    Flat,
    OutcomeOptions,
    normalize,
    outcome_advantages,
    register_estimator,
)
from agentgym.types import Group


@dataclass(frozen=True)
class GRPOOptions(OutcomeOptions):
    """GRPO options: the shared ones plus verl-agent's compatibility switches."""


def grpo_trajectory_advantages(flat: Flat, mode: str) -> np.ndarray:
    """``(N,)`` A_i, GRPO-normalized within each group (unbiased std).

    Args:
        flat: The flattened groups (``base.flatten``).
        mode: ``mean_std_norm`` or ``mean_norm``.

    Returns:
        One advantage per scorable trajectory, before the invalid-step penalty.
    """
    return normalize(flat.outcome, flat.group, mode=mode, ddof=1)  # (N,) one per trajectory


@register_estimator("grpo", options=GRPOOptions, level="trajectory")
class GRPO:
    """GRPO advantages (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("grpo", mode="mean_norm")
    """

    def __init__(self, options: GRPOOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"GRPO({self.options})"

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Advantages of every scorable trajectory in ``groups``, one per step."""
        return outcome_advantages(groups, self.options, grpo_trajectory_advantages,
                                  leave_one_out=False)
