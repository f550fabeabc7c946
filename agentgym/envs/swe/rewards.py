"""The SWE reward preset for G-RA: an episode's outcome label gates its turn rewards.

    R = r_high + 1[r_high ≥ δ]·Σ_t r_low_t,   r_high on the last step

The spec's default encoding (credit-assignment spec §6; "Gated Reward Accumulation",
arXiv 2508.10548), every value tunable in :class:`SWERewardConfig` (``algorithm.
reward_options``): r_high from the outcome label, no submit −1, empty patch −0.5, failing
patch 0, resolved +1; δ = 0; r_low_t = +0.1 for a turn the env accepted (``Step.valid``: the
action parsed, validated and ran), −0.1 for a malformed one.

The outcome label is read from the *last* step's ``result.info`` (submitting ends an SWE
episode), keys ``submitted``, ``resolved`` and ``patch_empty`` (renamable here; or pass
``label=`` any function of the trajectory). A missing ``submitted`` means no submission
(e.g. cut off by the turn limit). A submission with no ``resolved`` key, or unresolved with
no ``patch_empty`` key, cannot be labelled and raises SchemaError: an unscored submission is
not a failing one.

Registered as the ``swe`` preset (:mod:`agentgym.reward_presets`); its rates
(``completion_rate``, ``modification_rate``, ``resolve_rate``) are logged every step by any
run whose env reports the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from agentgym.errors import SchemaError
from agentgym.reward_presets import RewardComponent, RewardPreset
from agentgym.types import Trajectory

SWEOutcome = Literal["no_submit", "empty_patch", "failing_patch", "resolved"]


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


PRESET = RewardPreset("swe", SWERewardConfig, swe_components, swe_metrics,
                      summary="SWE outcome (submit, empty, failing, resolved) gating turn "
                              "validity")
