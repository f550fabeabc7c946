"""SPA's progress estimator: fitted during training, writes ĉ_t before the estimator.

On when the estimator needs a progress model (``algorithm.estimator: spa``). The fitter
(:mod:`agentgym.trainers.progress_train`) explores on the first step, measures, buffers,
refreshes and annotates each step's groups (a group transform), and is saved beside every
checkpoint (its state).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group

if TYPE_CHECKING:
    from agentgym.trainers.progress_train import ProgressFitter


class ProgressHook:
    """The group transform: ĉ_t from the progress estimator (refitted as it goes)."""

    def __init__(self, fitter: ProgressFitter) -> None:
        self.fitter = fitter

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        """Explore (first step), measure, buffer, refresh, annotate (``progress/*``)."""
        return await self.fitter.on_groups(ctx.step, groups, metrics, ctx.explore)


def build(ctx: MethodContext) -> Hooks | None:
    """The fitter's hooks, when the estimator needs a progress model."""
    from agentgym.trainers.progress_train import build_fitter

    fitter = build_fitter(ctx.config, ctx.model, None)  # a resumed run loads it as state
    if fitter is None:
        return None
    return Hooks(transforms=(ProgressHook(fitter),), state=(fitter,))


register_method("spa", build=build, order=30,
                summary="SPA's progress estimator: ĉ_t before the estimator, refitted")
