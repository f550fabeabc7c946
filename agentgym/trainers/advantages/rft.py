r"""RFT "advantages": imitate the successful rollouts, ignore the rest (rejection sampling).

    A_{i,t} = 1[keep_i] · 1[valid_t]      keep_i = success_i            (min_reward unset)
                                          keep_i = R_i ≥ min_reward     (min_reward set)

With these weights the policy loss is supervised fine-tuning on the kept rollouts: on the
first optimizer step of a step's update (on-policy, ratio 1) the PPO-clip gradient of
A·ratio is ∇ log π of the kept tokens, the NLL gradient of ``agentgym sft``; later epochs
or mini-batches are held to the clip range (a trust region on the imitation). Each training
step collects groups, keeps the successful episodes and fine-tunes on them: rejection-
sampling fine-tuning as a loop (``agentgym train`` with ``algorithm.estimator: rft``).

Paper: Yuan et al. 2023, "Scaling Relationship on Learning Mathematical Reasoning with Large
Language Models", arXiv 2308.01825 (RFT); as an iterated loop, Dong et al. 2023, "RAFT:
Reward rAnked FineTuning for Generative Foundation Model Alignment", arXiv 2304.06767.

Choices:

- **Success**: :func:`agentgym.evaluation.metrics.succeeded`, the rule every count of
  successes uses (the env's ``success`` flag on the last step, else a positive outcome
  reward); ``min_reward`` replaces it with a reward threshold.
- **Invalid steps** of a kept rollout get 0 (a malformed action is not imitated); λ,
  ``gamma`` and ``mode`` are accepted (one config serves every estimator) and unused.
- **No group baseline**: a group of one rollout is fine (``rollout.group_size`` may be 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.evaluation.metrics import succeeded
from agentgym.trainers.advantages.base import (
    Advantages,
    EstimatorOptions,
    outcome_score,
    register_estimator,
)
from agentgym.types import Group, Trajectory


@dataclass(frozen=True)
class RFTOptions(EstimatorOptions):
    """RFT options: the shared ones (unused) and the keep rule."""

    min_reward: float | None = None
    """Keep rollouts whose outcome score R_i is at least this; None = the env's success."""


@register_estimator("rft", options=RFTOptions, level="step", group_baseline=False)
class RFT:
    """Rejection-sampling fine-tuning weights (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("rft", min_reward=1.0)
    """

    def __init__(self, options: RFTOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"RFT({self.options})"

    def keep(self, traj: Trajectory) -> bool:
        """Whether the rollout is imitated."""
        if self.options.min_reward is None:
            return succeeded(traj)
        return outcome_score(traj) >= self.options.min_reward

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """1 on every valid step of a kept rollout, 0 elsewhere; one entry per scorable one."""
        out: Advantages = {}
        for group in groups:
            for traj in group.scorable:
                valid = np.fromiter((s.valid for s in traj.steps), bool, len(traj.steps))
                out[traj.id] = valid.astype(np.float64) * float(self.keep(traj))
        return out
