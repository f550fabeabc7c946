"""Median-baseline advantages: an example of adding an estimator as one file.

    A_i = R_i − median_{j∈G} R_j        (one value per trajectory, G scorable rollouts)
    A_{i,t} = A_i − λ·1[¬valid_t]       (the invalid-action penalty on the step's own value)

A robust cousin of Dr. GRPO's mean baseline: one outlier rollout does not move the baseline
of the rest. No paper; it exists to show that registering an estimator with its level and
needs is all the trainer has to be told.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.trainers.advantages.base import (
    Advantages,
    EstimatorOptions,
    broadcast,
    flatten,
    register_estimator,
    unflatten,
)
from agentgym.types import Group


@dataclass(frozen=True)
class MedianOptions(EstimatorOptions):
    """Only the shared options (λ; ``mode`` and ``gamma`` are not used)."""


@register_estimator("median_baseline", options=MedianOptions, level="trajectory")
class MedianBaseline:
    """Median-baseline advantages (module docstring)."""

    def __init__(self, options: MedianOptions) -> None:
        self.options = options

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """One advantage per step of every scorable trajectory."""
        flat = flatten(groups, gamma=1.0, invalid_penalty=self.options.invalid_penalty)
        baseline = np.zeros(len(flat.ids))  # (N,) the median of each trajectory's group
        for g in np.unique(flat.group):
            members = flat.group == g
            baseline[members] = np.median(flat.outcome[members])
        return unflatten(flat, broadcast(flat, flat.outcome - baseline))
