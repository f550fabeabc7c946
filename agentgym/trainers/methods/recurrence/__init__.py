"""Step-group recurrence: how often a step-level estimator finds company for a step.

GiGPO and HGPO compare a step with the others that reached the same state (its anchor
state group, or the level-k groups of its last k states); a step alone in its group gets
no step-level signal. On for every step-level estimator, this method logs, each training
step, the share of steps whose group has another member
(:func:`agentgym.trainers.advantages.diagnostics.recurrence_metrics`: ``credit/*``; for an
estimator that reads a history length K, levels 1 … K+1). A group transform that changes
nothing: the groups it reads are the ones the estimator will.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group

if TYPE_CHECKING:
    from agentgym.trainers.config import TrainConfig


class RecurrenceLog:
    """The group transform: ``credit/*`` metrics of the step's groups, groups unchanged."""

    def __init__(self, levels: int) -> None:
        self.levels = levels

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        """The groups as given; their recurrence in ``metrics``."""
        from agentgym.trainers.advantages.diagnostics import recurrence_metrics

        metrics.update(recurrence_metrics(groups, self.levels))
        return list(groups)


def active(config: TrainConfig) -> bool:
    """The estimator is step-level."""
    from agentgym.trainers.advantages import estimator_info

    return estimator_info(config.algorithm.estimator).level == "step"


def build(ctx: MethodContext) -> Hooks | None:
    """The log, for a step-level estimator (levels up to K+1 where it reads K)."""
    from agentgym.trainers.advantages import estimator_info

    cfg = ctx.config
    if not active(cfg):
        return None
    reads_k = "history_length" in estimator_info(cfg.algorithm.estimator).needs
    k = cfg.algorithm.options.get("history_length", cfg.rollout.history_length)
    return Hooks(transforms=(RecurrenceLog(int(k) + 1 if reads_k else 1),))


register_method("recurrence", build=build, order=95, active=active,
                summary="logs the share of steps whose step-level group has company")
