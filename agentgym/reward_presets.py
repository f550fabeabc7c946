"""Reward presets: the prioritized reward components an env family offers for G-RA / D-RA.

Gated reward accumulation (``algorithm.reward_accumulation``, :mod:`agentgym.trainers.rewards`)
rescores a trajectory from several reward components, each with a priority and a threshold.
Which components make sense is the env's knowledge (an SWE episode's outcome label and its
turns), so an env family registers a named preset here and a run picks it with
``algorithm.reward_preset`` and tunes it with ``algorithm.reward_options``. Like envs,
presets are registered by string (``"module:ATTRIBUTE"``), so naming one imports no env code
until it is used.

    register_reward_preset("swe", "agentgym.envs.swe.rewards:PRESET")
    get_reward_preset("swe").components({"no_submit": -2.0})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from agentgym.errors import ConfigError, did_you_mean
from agentgym.types import Trajectory

Score = Callable[[Trajectory], float | Sequence[float]]
"""Trajectory -> a float (a trajectory-level reward) or one float per step."""


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
class RewardPreset:
    """A named set of reward components, with its options and the rates it can report."""

    name: str
    """The name configs use (``algorithm.reward_preset``)."""
    options: type
    """A frozen dataclass of its options (``algorithm.reward_options`` fills it)."""
    make: Callable[[Any], tuple[RewardComponent, ...]]
    """The components, from an instance of ``options``."""
    metrics: Callable[[Sequence[Trajectory]], dict[str, float]] | None = None
    """Rates the trainer logs every step (empty when the env does not report them)."""
    summary: str = ""
    """One line for people."""

    def components(self, options: Mapping[str, Any] | None = None,
                   where: str = "algorithm.reward_options") -> tuple[RewardComponent, ...]:
        """The components with ``options`` applied (``where``: the options' config field).

        Raises:
            ConfigError: An option the preset does not have (naming the accepted ones), or
                a value its options reject.
        """
        values = dict(options or {})
        accepted = [f.name for f in fields(self.options)]
        for key in values:
            if key not in accepted:
                raise ConfigError(
                    f"{where}: the {self.name!r} reward preset has no option "
                    f"{key!r}; accepted: {', '.join(accepted)}{did_you_mean(key, accepted)}")
        try:
            return tuple(self.make(self.options(**values)))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None


_PRESETS: dict[str, str | RewardPreset] = {}


def register_reward_preset(name: str, preset: str | RewardPreset) -> None:
    """Register a preset, or the ``"module:ATTRIBUTE"`` that holds it (imported on use)."""
    _PRESETS[name] = preset


def reward_preset_names() -> list[str]:
    """Registered preset names, sorted."""
    _load()
    return sorted(_PRESETS)


def get_reward_preset(name: str) -> RewardPreset:
    """The preset registered as ``name``.

    Raises:
        ConfigError: No such preset (with did-you-mean).
    """
    _load()
    found = _PRESETS.get(name)
    if found is None:
        names = sorted(_PRESETS)
        raise ConfigError(f"no reward preset {name!r}; registered: {', '.join(names) or 'none'}"
                          f"{did_you_mean(name, names)}")
    if isinstance(found, str):
        module, _, attribute = found.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        if not isinstance(found, RewardPreset):
            raise TypeError(f"{_PRESETS[name]} is a {type(found).__name__}, not a RewardPreset")
        _PRESETS[name] = found
    return found


def preset_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Every registered preset's rates over ``trajs`` (each empty where not reported)."""
    out: dict[str, float] = {}
    for name in reward_preset_names():
        preset = get_reward_preset(name)
        if preset.metrics is not None:
            out.update(preset.metrics(trajs))
    return out


def _load() -> None:
    # The built-in envs register their presets when they are registered.
    from agentgym.registry import registry

    registry.load()
