"""SUPO's training side: one sequence per working context, the rollout's advantage on each.

On when ``rollout.context`` is ``summarize``. A sample builder (:mod:`agentgym.trainers.supo`)
in place of one sample per step, with ``supo/*`` metrics of every collected rollout. The
estimator's level is checked before any model loads (``algorithm.supo.step_level``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group

if TYPE_CHECKING:
    from agentgym.trainers.batching import Sample
    from agentgym.trainers.config import TrainConfig
    from agentgym.trainers.supo import SUPOOptions


class SUPOSamples:
    """The sample builder: I+1 sequences of a rollout with I summaries."""

    def __init__(self, options: SUPOOptions) -> None:
        self.options = options

    def samples(self, ctx: StepContext, groups: Sequence[Group],
                advantages: Mapping[str, np.ndarray], metrics: dict[str, float]
                ) -> list[Sample]:
        """One sequence per working context of each kept rollout (``supo/*`` metrics)."""
        from agentgym.trainers.supo import supo_metrics, supo_samples

        metrics.update(supo_metrics(ctx.trajectories))
        return supo_samples(groups, advantages, self.options,
                            skip_zero_advantage=False) if groups else []


def check(config: TrainConfig) -> None:
    """A step-level estimator needs ``algorithm.supo.step_level=per_step``."""
    from agentgym.trainers.supo import check_estimator

    if config.rollout.context == "summarize":
        check_estimator(config.algorithm.estimator, config.algorithm.supo)


def build(ctx: MethodContext) -> Hooks | None:
    """The sample builder, when rollouts summarize their context."""
    if ctx.config.rollout.context != "summarize":
        return None
    return Hooks(sample_builder=SUPOSamples(ctx.config.algorithm.supo))


def active(config: TrainConfig) -> bool:
    """Rollouts summarize their context."""
    return config.rollout.context == "summarize"


# Its summary turns are taken by the agent in this process (or on its vLLM engine); Ray's
# workers and the off-policy collectors run episodes without them.
register_method("supo", build=build, check=check, order=40, active=active,
                collectors=frozenset({"embedded", "vllm", "llamacpp"}),
                summary="SUPO: a sequence per working context (rollout.context=summarize)")
