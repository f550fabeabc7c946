"""Length penalty: an example of adding a training method as one folder plus a registration.

    R'_i = R_i − coef · T_i        (T_i: the rollout's turns; error rollouts untouched)

A group transform rewrites each scorable rollout's outcome reward before the estimator reads
it; an after-update hook counts the rollouts the policy trained on; that count is the
method's state, saved beside every checkpoint and loaded on resume. No paper: it exists to
show that the trainer needs nothing else to be told (``tests/trainers/test_method_plugin.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group


@dataclass(frozen=True)
class LengthPenaltyOptions:
    """The method's config section (``methods: {length_penalty: {coef: 0.05}}``)."""

    coef: float = 0.05
    """Reward taken off per turn."""

    def __post_init__(self) -> None:
        if not (isinstance(self.coef, (int, float)) and math.isfinite(self.coef)
                and self.coef >= 0):
            raise ValueError(f"coef must be a finite number >= 0, got {self.coef!r}")


class LengthPenalty:
    """Group transform, after-update hook and state in one object."""

    def __init__(self, options: LengthPenaltyOptions) -> None:
        self.options = options
        self.trained = 0

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        out = []
        for group in groups:
            trajs = tuple(
                replace(t, outcome_reward=t.outcome_reward - self.options.coef * len(t.steps))
                if t.scorable and t.outcome_reward is not None else t
                for t in group.trajectories)
            out.append(replace(group, trajectories=trajs))
        turns = [len(t.steps) for g in groups for t in g.scorable]
        metrics["length_penalty/mean"] = self.options.coef * sum(turns) / max(len(turns), 1)
        return out

    def after_update(self, ctx: StepContext, groups: Sequence[Group],
                     metrics: dict[str, float]) -> None:
        self.trained += sum(len(g.scorable) for g in groups)
        metrics["length_penalty/trained_rollouts"] = float(self.trained)

    def save(self, run_dir: Path, step: int) -> Path:
        path = Path(run_dir) / "length_penalty" / f"step-{step}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"trained": self.trained}))
        return path

    def load(self, run_dir: Path, step: int) -> None:
        path = Path(run_dir) / "length_penalty" / f"step-{step}.json"
        self.trained = int(json.loads(path.read_text())["trained"])


def build(ctx: MethodContext) -> Hooks:
    hook = LengthPenalty(ctx.options)
    return Hooks(transforms=(hook,), after_update=(hook,), state=(hook,))


register_method("length_penalty", build=build, options=LengthPenaltyOptions,
                summary="outcome reward minus coef per turn (an example plug-in)")
