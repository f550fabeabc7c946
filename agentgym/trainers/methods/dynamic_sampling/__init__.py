"""Dynamic sampling: groups whose rollouts all scored the same are replaced by fresh ones.

DAPO (Yu et al. 2025, arXiv:2503.14476, §3.2): a group whose G rollouts share one reward
has zero group-relative advantage everywhere, so it spends compute and shrinks the batch's
signal. DAPO over-samples and keeps only groups with 0 < accuracy < 1; here each step draws
fresh training tasks (the run's next seeds, with the current policy at the training
temperature) in place of the degenerate groups, round after round, until every one is
replaced or ``max_groups`` extra groups were drawn. Groups still degenerate then stay (they
still carry step-level and invalid-action signal). Turned on in a config with
``methods: {dynamic_sampling: {max_groups: 8}}``.

Deviations: a group counts as degenerate on the env's rewards (before G-RA's rescoring),
with fewer than two scorable rollouts or one outcome reward among them; drawn tasks use
seeds the next steps would have used (the seed stream moves on past them). Runs with
collectors whose seeds are planned ahead (async training, APRIL) are refused.

Metrics: ``dynamic/degenerate_groups`` (before refilling), ``dynamic/drawn_groups``,
``dynamic/refilled_groups``, ``dynamic/unfilled_groups``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.trainers.metrics import is_zero_variance
from agentgym.types import Group


@dataclass(frozen=True)
class DynamicSamplingOptions:
    """``methods.dynamic_sampling``."""

    max_groups: int = 8
    """Most extra groups drawn per step (each costs ``group_size`` rollouts)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.max_groups, int) and 1 <= self.max_groups <= 10_000):
            raise ValueError(f"max_groups must be an integer in [1, 10000], got "
                             f"{self.max_groups!r}")


def degenerate(group: Group) -> bool:
    """No group-relative signal: under two scorable rollouts, or all with one reward."""
    return len(group.scorable) < 2 or is_zero_variance(group)


class Refill:
    """The group transform: degenerate groups replaced by informative fresh ones."""

    def __init__(self, options: DynamicSamplingOptions) -> None:
        self.options = options

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        """The step's informative groups, then fresh ones in the degenerate ones' place."""
        assert ctx.draw is not None, "the loop gives every step a draw"
        informative = [g for g in groups if not degenerate(g)]
        stale = [g for g in groups if degenerate(g)]
        fills: list[Group] = []
        drawn, budget = 0, self.options.max_groups
        while len(fills) < len(stale) and drawn < budget:
            want = min(len(stale) - len(fills), budget - drawn)
            fresh = Group.from_trajectories(await ctx.draw(want))
            drawn += want
            fills += [g for g in fresh if not degenerate(g)][:len(stale) - len(fills)]
        metrics.update({"dynamic/degenerate_groups": float(len(stale)),
                        "dynamic/drawn_groups": float(drawn),
                        "dynamic/refilled_groups": float(len(fills)),
                        "dynamic/unfilled_groups": float(len(stale) - len(fills))})
        return informative + fills + stale[len(fills):]


def build(ctx: MethodContext) -> Hooks:
    """The refilling transform (first, so the other methods see the groups trained on)."""
    return Hooks(transforms=(Refill(ctx.options),))


register_method("dynamic_sampling", build=build, options=DynamicSamplingOptions, order=5,
                collectors=frozenset({"embedded", "vllm", "llamacpp", "ray"}),
                summary="DAPO's dynamic sampling: degenerate groups replaced by fresh ones")
