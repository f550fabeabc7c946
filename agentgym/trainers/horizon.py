r"""Interaction-horizon schedule: ScalingInter-RL (Xi et al. 2025, AgentGym-RL, arXiv 2509.08755).

Training starts with a small cap on interaction turns and raises it as training goes on, so
the agent first learns to exploit short horizons and later explores long ones. With
milestones (s_0 = 0 < s_1 < … < s_n) and caps (h_0 ≤ h_1 ≤ … ≤ h_n), the cap at training
step t is

    stepwise:  h(t) = h_k                                           for s_k ≤ t < s_{k+1}
    linear:    h(t) = ⌊h_k + (h_{k+1} − h_k)·(t − s_k)/(s_{k+1} − s_k)⌋   for s_k ≤ t < s_{k+1}

and h(t) = h_n from s_n on. The paper's schedule is the stepwise one with evenly spaced
milestones (h grows by δh every Δ steps).

How the cap is applied: it is the rollout engine's step cap (``RolloutConfig.max_steps``)
for the training rollouts of step t, so it works with every env, every estimator and every
driver: an episode that reaches it ends as ``truncated``, scored as the env left it (the
sum of its step rewards, or the env's reported outcome). The env's own turn limit still
applies when it is lower. Held-out evaluation never reads the schedule: it keeps the env's
own limit. The cap of each step is logged as ``horizon/max_turns``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Literal

from agentgym.errors import ConfigError


@dataclass(frozen=True)
class HorizonSchedule:
    """Training steps → max interaction turns (the ``rollout.horizon_schedule`` section).

    Example (ScalingInter-RL's 5 → 10 → 15 turns, raised every 100 steps)::

        rollout:
          horizon_schedule: {mode: stepwise, steps: [0, 100, 200], max_turns: [5, 10, 15]}
    """

    mode: Literal["off", "stepwise", "linear"] = "off"
    """``off``: no cap from the schedule; ``stepwise``: the cap of the last milestone reached;
    ``linear``: interpolated between milestones (rounded down)."""
    steps: tuple[int, ...] = ()
    """Milestone training steps, increasing, the first one 0."""
    max_turns: tuple[int, ...] = ()
    """The turn cap at each milestone (non-decreasing, each >= 1)."""

    def __post_init__(self) -> None:
        if self.mode == "off":
            return
        where = "rollout.horizon_schedule"
        fix = f"; e.g. {where}.steps=[0,100] {where}.max_turns=[5,10]"
        for name in ("steps", "max_turns"):
            values = getattr(self, name)
            if not values or not all(isinstance(v, int) and not isinstance(v, bool)
                                     for v in values):
                raise ConfigError(f"{where}.{name} must be a non-empty list of ints, got "
                                  f"{list(values)}{fix}")
        if len(self.steps) != len(self.max_turns):
            raise ConfigError(f"{where}: {len(self.steps)} steps but {len(self.max_turns)} "
                              f"max_turns; give one cap per milestone{fix}")
        pairs = zip(self.steps, self.steps[1:], strict=False)
        if self.steps[0] != 0 or any(b <= a for a, b in pairs):
            raise ConfigError(f"{where}.steps must start at 0 and increase, got "
                              f"{list(self.steps)}{fix}")
        if min(self.max_turns) < 1 or any(
                b < a for a, b in zip(self.max_turns, self.max_turns[1:], strict=False)):
            raise ConfigError(f"{where}.max_turns must be >= 1 and never decrease, got "
                              f"{list(self.max_turns)}{fix}")

    @property
    def enabled(self) -> bool:
        """Whether the schedule caps training rollouts."""
        return self.mode != "off"

    def at(self, step: int) -> int | None:
        """The turn cap of training step ``step`` (0-based), or None when off."""
        if not self.enabled:
            return None
        k = bisect.bisect_right(self.steps, step) - 1  # the last milestone reached
        if self.mode == "stepwise" or k == len(self.steps) - 1:
            return self.max_turns[k]
        s0, s1 = self.steps[k], self.steps[k + 1]
        h0, h1 = self.max_turns[k], self.max_turns[k + 1]
        return h0 + (h1 - h0) * (step - s0) // (s1 - s0)
