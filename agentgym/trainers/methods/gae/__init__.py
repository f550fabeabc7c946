"""GAE's critic: a value head that writes V(s_t) before the estimator and is fitted after.

On when the estimator is a :class:`~agentgym.trainers.advantages.gae.ValueEstimator` that
uses values (``algorithm.estimator: gae`` with λ-returns). The critic
(:mod:`agentgym.trainers.critic`) copies the initial policy's backbone, annotates each
scorable step with V(s_t) (a group transform), is fitted on the estimator's returns after the
policy update (an update hook), and is saved beside every checkpoint (its state).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group

if TYPE_CHECKING:
    from agentgym.trainers.advantages.gae import ValueEstimator
    from agentgym.trainers.critic import Critic


class CriticHooks:
    """V(s_t) into the steps before the estimator; the value loss after the update."""

    def __init__(self, critic: Critic, estimator: ValueEstimator) -> None:
        self.critic, self.estimator = critic, estimator

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        """The groups with V(s_t) in every scorable step, where the estimator reads it."""
        return self.critic.annotate(groups)

    def after_update(self, ctx: StepContext, groups: Sequence[Group],
                     metrics: dict[str, float]) -> None:
        """Fit the critic on the returns the advantages used (``value/*`` metrics)."""
        if groups:
            metrics.update(self.critic.fit(groups, self.estimator.returns(groups)))


def build(ctx: MethodContext) -> Hooks | None:
    """The critic's hooks, when the estimator reads values."""
    from agentgym.trainers.advantages.gae import ValueEstimator
    from agentgym.trainers.critic import Critic

    estimator = ctx.estimator
    if not (isinstance(estimator, ValueEstimator) and estimator.uses_values):
        return None
    critic = Critic.from_policy(ctx.model, ctx.config.algorithm.value)
    hooks = CriticHooks(critic, estimator)
    return Hooks(transforms=(hooks,), after_update=(hooks,), state=(critic,))


register_method("gae", build=build, order=20,
                summary="GAE's value head: V(s_t) before the estimator, fitted after the update")
