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
- **SWE preset** (``swe_components``, the spec's default encoding, every value tunable in
  ``SWERewardConfig``): r_high from the outcome label, no submit −1, empty patch −0.5,
  failing patch 0, resolved +1; δ = 0; r_low_t = +0.1 for a turn the env accepted
  (``Step.valid``: the action parsed, validated and ran), −0.1 for a malformed one.
- **Outcome label source**: the *last* step's ``result.info`` (submitting ends an SWE
  episode), keys ``submitted``, ``resolved`` and ``patch_empty`` (renamable in
  ``SWERewardConfig``; or pass ``label=`` any function of the trajectory). A missing
  ``submitted`` means no submission (e.g. cut off by the turn limit). A submission with no
  ``resolved`` key, or unresolved with no ``patch_empty`` key, cannot be labelled and raises
  SchemaError: an unscored submission is not a failing one.
- **One invalid-turn penalty**: the SWE preset already charges a malformed turn
  (``malformed_turn``), and every estimator has its own invalid-action penalty λ
  (``invalid_penalty``, default 0.1). Stacked, a malformed turn would cost 0.2 plus the lost
  +0.1. ``estimator_options`` therefore sets λ to 0 when rewards are accumulated and the
  estimator options do not name ``invalid_penalty``; naming it asks for both penalties.
- **Bookkeeping**: each rescored trajectory gets ``metrics["reward/<name>"]`` (R^(i),
  ungated) and ``metrics["reward/gate_<name>"]`` (g_i) for logging; error trajectories are
  returned unchanged (they are unscorable either way).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.metrics import is_zero_variance
from agentgym.types import Group, Trajectory

Accumulation = Literal["gated", "direct"]
SWEOutcome = Literal["no_submit", "empty_patch", "failing_patch", "resolved"]
Score = Callable[[Trajectory], float | Sequence[float]]


@dataclass(frozen=True)
class RewardComponent:
    """One reward source R^(i) with its priority p_i and threshold δ_i."""

    name: str
    """Unique name (used in ``metrics["reward/<name>"]``)."""
    score: Score
    """Trajectory -> a float (placed on the last step) or one float per step."""
    priority: float = 0.0
    """p_i: a component gates every component of strictly lower priority."""
    threshold: float = 0.0
    """δ_i: lower components count only when R^(i) >= δ_i."""


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
        components: The reward components (``swe_components()`` for the SWE preset).
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


@dataclass(frozen=True)
class SWERewardConfig:
    """The SWE encoding of G-RA (spec §6 defaults) and where its outcome label is read."""

    no_submit: float = -1.0
    """r_high when the episode ends without a submission."""
    empty_patch: float = -0.5
    """r_high for a submission with an empty diff."""
    failing_patch: float = 0.0
    """r_high for a non-empty patch whose tests fail."""
    resolved: float = 1.0
    """r_high for a patch that resolves the issue."""
    threshold: float = 0.0
    """δ: turn rewards count only when r_high >= δ."""
    valid_turn: float = 0.1
    """r_low_t for a turn the env accepted (``Step.valid``)."""
    malformed_turn: float = -0.1
    """r_low_t for a turn the env rejected."""
    submitted_key: str = "submitted"
    """Last step's info key: the agent submitted (missing = no)."""
    resolved_key: str = "resolved"
    """Last step's info key: the submitted patch resolves the issue."""
    patch_empty_key: str = "patch_empty"
    """Last step's info key: the submitted diff is empty."""


def swe_outcome(traj: Trajectory, config: SWERewardConfig = SWERewardConfig()) -> SWEOutcome:
    """The outcome label of an SWE episode, from its last step's info (module docstring).

    Raises:
        SchemaError: A submission whose result the env did not report.
    """
    info = traj.steps[-1].result.info if traj.steps else {}
    if not info.get(config.submitted_key, False):
        return "no_submit"
    for key in (config.resolved_key, config.patch_empty_key):
        if key not in info:
            raise SchemaError(
                f"trajectory {traj.id!r} submitted but its last step's info has no {key!r} "
                f"(it has {sorted(info)}); report it from the env, or name the key with "
                "SWERewardConfig(resolved_key=..., patch_empty_key=...)")
        if key == config.resolved_key and info[key]:
            return "resolved"
    return "empty_patch" if info[config.patch_empty_key] else "failing_patch"


def swe_components(config: SWERewardConfig = SWERewardConfig(),
                   label: Callable[[Trajectory], SWEOutcome] | None = None
                   ) -> tuple[RewardComponent, RewardComponent]:
    """The two-level SWE components: ``outcome`` (priority 1, δ) gating ``turns`` (priority 0).

    Args:
        config: Reward values, threshold and info keys.
        label: Outcome label of a trajectory; default ``swe_outcome`` with ``config``.

    Example:
        >>> high, low = swe_components()
        >>> (high.name, high.priority, high.threshold), (low.name, low.priority)
        (('outcome', 1.0, 0.0), ('turns', 0.0))
    """
    values = {"no_submit": config.no_submit, "empty_patch": config.empty_patch,
              "failing_patch": config.failing_patch, "resolved": config.resolved}

    def outcome(traj: Trajectory) -> float:
        return values[(label or (lambda t: swe_outcome(t, config)))(traj)]

    def turns(traj: Trajectory) -> list[float]:
        return [config.valid_turn if s.valid else config.malformed_turn for s in traj.steps]

    return (RewardComponent("outcome", outcome, priority=1.0, threshold=config.threshold),
            RewardComponent("turns", turns, priority=0.0))


def swe_metrics(trajs: Sequence[Trajectory], config: SWERewardConfig = SWERewardConfig()
                ) -> dict[str, float]:
    """Completion, modification and resolve rates over the scorable trajectories.

    ``completion_rate``: share that submitted; ``modification_rate``: share that submitted
    a non-empty diff (``patch_empty`` false, or resolved); ``resolve_rate``: share
    resolved. Each is reported only when some last step carries its info key (the env
    reports it); a missing key counts as "no".
    """
    infos = [t.steps[-1].result.info if t.steps else {} for t in trajs if t.scorable]
    out: dict[str, float] = {}
    n = max(len(infos), 1)
    sub, empty, res = config.submitted_key, config.patch_empty_key, config.resolved_key
    if any(sub in i for i in infos):
        out["completion_rate"] = sum(bool(i.get(sub)) for i in infos) / n
    if any(empty in i for i in infos):  # a resolving patch is a modification too
        out["modification_rate"] = sum(bool(i.get(sub)) and (bool(i.get(res)) or (
            empty in i and not i[empty])) for i in infos) / n
    if any(res in i for i in infos):
        out["resolve_rate"] = sum(bool(i.get(res)) for i in infos) / n
    return out


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
