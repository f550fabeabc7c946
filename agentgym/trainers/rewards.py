r"""Reward accumulation: G-RA (gated) and D-RA (direct sum) over prioritized reward components.

    R(τ)   = Σ_i g_i(τ)·R^(i)(τ),     g_i(τ) = Π_{j: p_j > p_i} 1[R^(j)(τ) ≥ δ_j]     (G-RA)
    R(τ)   = Σ_i R^(i)(τ)                                                          (D-RA)
    r̃_t    = Σ_i g_i(τ)·r^(i)_t       per-step form; R^(i) = Σ_t r^(i)_t
    Two levels: R = r_high + 1[r_high ≥ δ]·Σ_t r_low_t, with r_high on the last step.

Paper: "Gated Reward Accumulation" (G-RA), arXiv 2508.10548 (credit-assignment spec §6).
Dense rule-based rewards (well-formed output, valid tool call) help long-horizon SWE agents,
but summed directly they get hacked: total reward rises while outcomes fall (the agent stops
submitting). Gating counts a lower-priority reward only when every higher-priority reward
clears its threshold.

This module rewrites trajectories rather than computing advantages: ``rescore_groups``
returns new groups whose step rewards are r̃_t and whose ``outcome_reward`` is R(τ), so any
advantage estimator runs on them unchanged (GRPO/RLOO read R, GiGPO/HGPO read r̃_t). The
gate depends on the outcome, so rescore after the episode ends, before the estimator.

Choices the paper leaves open, and what we do:

- **Components**: each scores a trajectory with a float (a trajectory-level reward, placed
  on the last step; a trajectory with no steps keeps it in R only) or one float per step.
  Equal priorities do not gate each other; a component gates only strictly lower ones.
- **Which components**: the env family's knowledge, so a run names a *preset* the env
  registered (``algorithm.reward_preset``, :mod:`agentgym.reward_presets`), tuned by
  ``algorithm.reward_options``. The SWE env's (``swe``, the spec's default encoding:
  outcome label gating turn validity) is in :mod:`agentgym.envs.swe.rewards`.
- **One invalid-turn penalty**: the SWE preset already charges a malformed turn
  (``malformed_turn``), and every estimator has its own invalid-action penalty λ
  (``invalid_penalty``, default 0.1). Stacked, a malformed turn would cost 0.2 plus the lost
  +0.1 (with the SWE preset). ``estimator_options`` therefore sets λ to 0 when rewards are
  accumulated and the estimator options do not name ``invalid_penalty``; naming it asks for
  both penalties.
- **Bookkeeping**: each rescored trajectory gets ``metrics["reward/<name>"]`` (R^(i),
  ungated) and ``metrics["reward/gate_<name>"]`` (g_i) for logging; error trajectories are
  returned unchanged (they are unscorable either way).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from agentgym.errors import ConfigError
from agentgym.reward_presets import RewardComponent, Score, get_reward_preset
from agentgym.trainers.metrics import is_zero_variance
from agentgym.types import Group, Trajectory

__all__ = ["AccumulatedReward", "RewardComponent", "Score", "accumulate",
           "accumulation_metrics", "estimator_options", "preset_components", "rescore_groups"]

Accumulation = Literal["gated", "direct"]


@dataclass(frozen=True)
class AccumulatedReward:
    """The accumulated reward of one trajectory."""

    step_rewards: tuple[float, ...]
    """r̃_t, one per step."""
    total: float
    """R(τ) = Σ_i g_i R^(i); it equals Σ_t r̃_t when the trajectory has steps."""
    components: Mapping[str, float]
    """R^(i) per component name, ungated."""
    gates: Mapping[str, bool]
    """g_i per component name (all True under ``direct``)."""


def _check(components: Sequence[RewardComponent], accumulation: str) -> None:
    if accumulation not in ("gated", "direct"):
        raise ConfigError(f"accumulation must be 'gated' (G-RA) or 'direct' (D-RA), got "
                          f"{accumulation!r}")
    names = [c.name for c in components]
    if len(set(names)) != len(names) or not names:
        raise ConfigError(f"reward components need unique names, got {names}")
    for c in components:
        if not (math.isfinite(c.priority) and math.isfinite(c.threshold)):
            raise ConfigError(f"component {c.name!r}: priority and threshold must be finite, "
                              f"got {c.priority} and {c.threshold}")


def accumulate(traj: Trajectory, components: Sequence[RewardComponent],
               accumulation: Accumulation = "gated") -> AccumulatedReward:
    """The G-RA (or D-RA) reward of one trajectory.

    Args:
        traj: A finished trajectory.
        components: The reward components.
        accumulation: ``gated`` (G-RA) or ``direct`` (D-RA, the ungated sum).

    Returns:
        Per-step rewards, total, component values and gates.

    Raises:
        ConfigError: Bad components or accumulation.
        ValueError: A component scored a number of steps other than the trajectory's.
    """
    _check(components, accumulation)
    n = len(traj.steps)
    per_step: dict[str, list[float]] = {}
    totals: dict[str, float] = {}
    for c in components:
        value = c.score(traj)
        if isinstance(value, numbers.Real):  # trajectory level: on the last step
            totals[c.name] = float(value)
            per_step[c.name] = [0.0] * (n - 1) + [float(value)] if n else []
        else:
            per_step[c.name] = [float(v) for v in cast(Sequence[float], value)]
            if len(per_step[c.name]) != n:
                raise ValueError(f"component {c.name!r} scored {len(per_step[c.name])} steps "
                                 f"of trajectory {traj.id!r}, which has {n}")
            totals[c.name] = math.fsum(per_step[c.name])
    gates = {c.name: accumulation == "direct" or all(
        totals[h.name] >= h.threshold for h in components if h.priority > c.priority)
        for c in components}
    steps = tuple(math.fsum(per_step[c.name][t] for c in components if gates[c.name])
                  for t in range(n))
    total = math.fsum(totals[c.name] for c in components if gates[c.name])
    return AccumulatedReward(steps, total, totals, gates)


def rescore_groups(groups: Sequence[Group], components: Sequence[RewardComponent],
                   accumulation: Accumulation = "gated") -> list[Group]:
    """New groups whose scorable trajectories carry the accumulated rewards.

    Step rewards become r̃_t and ``outcome_reward`` becomes R(τ) (``dataclasses.replace``;
    the inputs are untouched), so any registered estimator runs on the result.

    Args:
        groups: Finished groups.
        components: The reward components (a preset's: :func:`preset_components`).
        accumulation: ``gated`` (G-RA) or ``direct`` (D-RA).

    Returns:
        The groups, in order, with error trajectories unchanged.
    """
    out = []
    for group in groups:
        trajs = []
        for traj in group.trajectories:
            if not traj.scorable:
                trajs.append(traj)
                continue
            acc = accumulate(traj, components, accumulation)
            steps = tuple(replace(s, result=replace(s.result, reward=r))
                          for s, r in zip(traj.steps, acc.step_rewards, strict=True))
            metrics = {**traj.metrics, **{f"reward/{k}": v for k, v in acc.components.items()},
                       **{f"reward/gate_{k}": float(v) for k, v in acc.gates.items()}}
            trajs.append(replace(traj, steps=steps, outcome_reward=acc.total, metrics=metrics))
        out.append(replace(group, trajectories=tuple(trajs)))
    return out


def preset_components(preset: str, options: Mapping[str, Any] | None = None,
                      where: str = "algorithm.reward_options") -> tuple[RewardComponent, ...]:
    """The components of the reward preset ``preset`` with ``options`` applied.

    ``where`` names the options' config field in error messages.

    Raises:
        ConfigError: An unknown preset or option.
    """
    return get_reward_preset(preset).components(options, where)


def estimator_options(options: Mapping[str, Any], accumulation: str) -> dict[str, Any]:
    """Estimator options with one invalid-turn penalty when rewards are accumulated.

    With ``accumulation`` ``gated`` or ``direct`` the reward components already penalize a
    malformed turn, so the estimator's λ is set to 0 unless ``options`` names
    ``invalid_penalty`` (then both apply, as asked). With ``none`` the options are unchanged.

    Args:
        options: Estimator options as configured (``algorithm.options`` or ``--set``).
        accumulation: ``none``, ``gated`` or ``direct``.

    Returns:
        A new dict of options.

    Example:
        >>> estimator_options({"gamma": 0.9}, "gated")
        {'gamma': 0.9, 'invalid_penalty': 0.0}
        >>> estimator_options({"invalid_penalty": 0.1}, "gated")
        {'invalid_penalty': 0.1}
    """
    out = dict(options)
    if accumulation != "none":
        out.setdefault("invalid_penalty", 0.0)
    return out


def accumulation_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """Means of the ``reward/…`` metrics that ``rescore_groups`` wrote, and R(τ)'s own.

    ``accumulated/reward_mean`` is the mean R(τ) the estimator trains on and
    ``accumulated/zero_variance_groups`` the share of groups whose R(τ) are all equal.
    The step's ``reward_mean`` and ``zero_variance_groups`` describe the env's reward; an SWE
    run whose env reward is 0 throughout can still learn from R(τ) (submit vs not, valid
    vs malformed turns), which only these two show.
    """
    sums: dict[str, list[float]] = {}
    for traj in (t for g in groups for t in g.scorable):
        for key, value in traj.metrics.items():
            if key.startswith("reward/"):
                sums.setdefault(key, []).append(float(value))
    out = {k: math.fsum(v) / len(v) for k, v in sums.items()}
    totals = [t.outcome_reward or 0.0 for g in groups for t in g.scorable]
    if totals:
        out["accumulated/reward_mean"] = math.fsum(totals) / len(totals)
        out["accumulated/zero_variance_groups"] = sum(map(is_zero_variance, groups)) / len(groups)
    return out
