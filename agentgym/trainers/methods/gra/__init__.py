"""G-RA / D-RA: rewrite a step's rewards before the estimator (``agentgym/trainers/rewards.py``).

On when ``algorithm.reward_accumulation`` is ``gated`` or ``direct``; its components come
from ``algorithm.reward_options`` (the SWE preset's fields). A group transform: every
group's rollouts are rescored, and ``reward/*`` metrics say what the gate did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group

if TYPE_CHECKING:
    from agentgym.trainers.config import TrainConfig
    from agentgym.trainers.rewards import Accumulation, RewardComponent


class RewardAccumulation:
    """The group transform: rescored rollouts (and their ``reward/*`` metrics)."""

    def __init__(self, components: Sequence[RewardComponent],
                 accumulation: Accumulation) -> None:
        self.components = tuple(components)
        self.accumulation: Accumulation = accumulation

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        """Every group rescored by the accumulated (or gated) reward."""
        from agentgym.trainers.rewards import accumulation_metrics, rescore_groups

        out = rescore_groups(groups, self.components, self.accumulation)
        metrics.update(accumulation_metrics(out))
        return out


def components(config: TrainConfig) -> tuple[RewardComponent, ...] | None:
    """The run's reward components, or None without reward accumulation.

    Raises:
        ConfigError: An unknown ``algorithm.reward_preset`` or an option it does not take.
    """
    from agentgym.trainers.rewards import preset_components

    if config.algorithm.reward_accumulation == "none":
        return None
    return preset_components(config.algorithm.reward_preset, config.algorithm.reward_options)


def check(config: TrainConfig) -> None:
    """Bad ``reward_options`` fail before any model loads."""
    components(config)


def build(ctx: MethodContext) -> Hooks | None:
    """The rescoring transform, when the run accumulates rewards."""
    found, accumulation = components(ctx.config), ctx.config.algorithm.reward_accumulation
    if found is None or accumulation == "none":
        return None
    return Hooks(transforms=(RewardAccumulation(found, accumulation),))


register_method("gra", build=build, check=check, order=10,
                summary="gated / direct reward accumulation (algorithm.reward_accumulation)")
