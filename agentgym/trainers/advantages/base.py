"""Advantage estimators: the shared interface, registry, options and math helpers.

An estimator is a pure, deterministic function from task groups to ``Advantages`` (trajectory
id -> ``(T,)`` float64, one value per step). Shared conventions (credit-assignment spec §0):

- **Unscorable** trajectories (``status="error"``) get no entry and enter no statistic. A
  group with fewer than 2 scorable trajectories gives zeros to its scorable ones.
- **Outcome score** R_i = ``traj.with_outcome().outcome_reward``: the trajectory's
  ``outcome_reward`` if set, else the last step's ``info["outcome_reward"]``, else the sum of
  step rewards (``None`` as 0). λ does not enter R_i.
- **Return-to-go** G_t = r_t + γ·G_{t+1}, G_{T-1} = r_{T-1}, no bootstrap on truncation.
- **Invalid-action penalty** λ is step-local, never propagated (spec: "subtracted from *its
  own* score and its own G_t"). Step level: G_t = Σ_k γ^k r_{t+k} − λ·1[¬valid_t], so earlier
  returns do not carry it. Trajectory level: A_{i,t} = A_i − λ·1[¬valid_t], applied after
  the group normalization. Why not R_i − λ·n_invalid: that hands one step's penalty to every
  step of the trajectory and to the group baseline. Why not (R_i − λ − μ)/(σ + ε): in a
  zero-variance group that is −λ/ε = −1e5, in the very groups where λ is the only signal.
  The two placements do not coincide in ``mean_norm`` or RLOO either: subtracting λ before
  the statistics also moves the baseline, so every advantage differs by λ × the share of
  invalid entries in the group.
- **Std** is named at each call (``ddof=1`` unbiased for GRPO/GiGPO, ``ddof=0`` population
  for HGPO); ε = 1e-6 is added to it.

The JSONL input/output used by ``agentgym advantages`` lives in ``__init__.py``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import numpy as np

from agentgym.errors import ConfigError, SchemaError, did_you_mean
from agentgym.types import Group, Step, Trajectory

Advantages = dict[str, np.ndarray]
"""Trajectory id -> ``(T,)`` float64 advantages, one per step; scorable trajectories only."""
Estimator = Callable[[Sequence[Group]], Advantages]
Mode = Literal["mean_std_norm", "mean_norm"]
EPS = 1e-6  # added to every std before dividing


@dataclass(frozen=True)
class EstimatorOptions:
    """Options every estimator accepts (spec §0); subclasses add their own."""

    gamma: float = 1.0
    """Discount γ of the return-to-go, in [0, 1]; trajectory-level estimators do not use it."""
    invalid_penalty: float = 0.1
    """λ ≥ 0 taken from the own advantage/return of each step with ``valid=False``; 0 disables."""
    mode: Mode = "mean_std_norm"
    """``mean_std_norm``: (x − mean)/(std + ε); ``mean_norm``: x − mean (Dr. GRPO)."""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            try:
                object.__setattr__(self, f.name, coerce(value, hints[f.name], text=False))
            except ValueError as exc:
                raise ConfigError(f"option {f.name} expects {exc}, got {value!r} "
                                  f"({type(value).__name__})") from None
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {self.gamma}; try gamma=0.95")
        if not (math.isfinite(self.invalid_penalty) and self.invalid_penalty >= 0):
            raise ConfigError(f"invalid_penalty must be a finite number >= 0, got "
                              f"{self.invalid_penalty}; use 0 to disable the penalty")


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def coerce(value: Any, hint: Any, *, text: bool) -> Any:
    """``value`` as the type ``hint`` asks (bool/int/float/str/None, Literal, unions).

    With ``text=True`` strings are converted (``--set key=value``); ints become floats for
    float fields. Raises ValueError naming what was expected (``"a number"``, ``"one of …"``).
    """
    origin = get_origin(hint)
    if origin is Literal:
        for choice in get_args(hint):
            if value == choice or (text and isinstance(value, str) and value == str(choice)):
                return choice
        raise ValueError("one of " + ", ".join(repr(c) for c in get_args(hint)))
    if origin in (Union, types.UnionType):
        for arm in get_args(hint):
            try:
                return coerce(value, arm, text=text)
            except ValueError:
                pass
        raise ValueError(" or ".join(_describe(arm) for arm in get_args(hint)))
    is_text = text and isinstance(value, str)
    if hint is bool and (isinstance(value, bool) or (is_text and value.lower() in _BOOLS)):
        return value if isinstance(value, bool) else _BOOLS[value.lower()]
    if hint is int and not isinstance(value, bool):
        if isinstance(value, int) or (is_text and re.fullmatch(r"\s*[+-]?\d+\s*", value)):
            return int(value)
    if hint is float and not isinstance(value, bool):
        if isinstance(value, int | float):
            return float(value)
        if is_text:
            with contextlib.suppress(ValueError):
                return float(value)
    if hint is str and isinstance(value, str):
        return value
    null_text = text and isinstance(value, str) and value.lower() in ("none", "null")
    if hint is type(None) and (value is None or null_text):
        return None
    raise ValueError(_describe(hint))


def _describe(hint: Any) -> str:
    if get_origin(hint) is Literal:
        return " or ".join(repr(c) for c in get_args(hint))
    names = {bool: "a boolean (true/false)", int: "an integer", float: "a number",
             str: "a string", type(None): "none"}
    return names.get(hint, str(hint))


def parse_options(options_cls: type[EstimatorOptions], pairs: Mapping[str, str]) -> dict[str, Any]:
    """Typed option values from ``--set key=value`` strings, by the fields' type hints.

    Raises:
        ConfigError: An unknown key (naming the accepted ones) or a value of the wrong type.
    """
    hints = get_type_hints(options_cls)
    accepted = [f.name for f in fields(options_cls)]
    out: dict[str, Any] = {}
    for key, text in pairs.items():
        if key not in accepted:
            raise ConfigError(f"{options_cls.__name__} has no option {key!r}; accepted: "
                              f"{', '.join(accepted)}{did_you_mean(key, accepted)}")
        try:
            out[key] = coerce(text, hints[key], text=True)
        except ValueError as exc:
            raise ConfigError(f"--set {key}={text}: {key} expects {exc}") from None
    return out


Level = Literal["trajectory", "step"]
Need = Literal["history_length", "progress_model", "value_model"]


@dataclass(frozen=True)
class EstimatorInfo:
    """What the trainer must know about an estimator, declared where it is registered.

    The training loop, the config checks and SUPO read these fields instead of lists of
    estimator names, so a new estimator is one file.
    """

    name: str
    """Registered name (``algorithm.estimator``)."""
    factory: Callable[..., Any]
    """A class ``cls(options)(groups)`` or a function ``fn(groups, options)``."""
    options: type[EstimatorOptions]
    """The options dataclass (``algorithm.options`` and ``--set`` map onto it)."""
    level: Level = "step"
    """``trajectory``: one value per trajectory (minus the per-step λ), which SUPO may share
    across a rollout's sequences; ``step``: a value of its own per step."""
    group_baseline: bool = True
    """Statistics over the G rollouts of a task: ``rollout.group_size`` must be >= 2."""
    needs: tuple[Need, ...] = ()
    """``history_length``: the context window K (set from ``rollout.history_length``);
    ``progress_model``: a fitted progress estimator writes ĉ_t into the steps (SPA);
    ``value_model``: a value head writes V(s_t) into the steps and is fitted to the
    estimator's ``returns(groups)`` after each update (GAE)."""


_REGISTRY: dict[str, EstimatorInfo] = {}


def register_estimator(name: str, *, options: type[EstimatorOptions], level: Level = "step",
                       group_baseline: bool = True, needs: Sequence[Need] = ()
                       ) -> Callable[[Any], Any]:
    """Register a class ``cls(options)(groups)`` or a function ``fn(groups, options)``.

    Args:
        name: The name configs and the CLI use.
        options: The options dataclass, a subclass of :class:`EstimatorOptions`.
        level: ``trajectory`` or ``step`` (:class:`EstimatorInfo`).
        group_baseline: Whether it needs G >= 2 rollouts per task.
        needs: What the trainer must provide (:class:`EstimatorInfo`).

    Raises:
        ConfigError: ``name`` is already registered by another class or function.
    """
    def decorate(factory: Any) -> Any:
        old = _REGISTRY.get(name)
        same = old is not None and (old.factory.__module__, old.factory.__qualname__) == (
            factory.__module__, factory.__qualname__)
        if old is not None and not same:
            raise ConfigError(f"estimator {name!r} is already registered by "
                              f"{old.factory.__module__}.{old.factory.__qualname__}; "
                              "pick another name")
        _REGISTRY[name] = EstimatorInfo(name, factory, options, level, group_baseline,
                                        tuple(needs))
        return factory
    return decorate


def estimator_names() -> list[str]:
    """Registered estimator names, sorted."""
    return sorted(_REGISTRY)


def estimator_info(name: str) -> EstimatorInfo:
    """The registration of estimator ``name``.

    Raises:
        ConfigError: No estimator of that name (the message lists the registered ones).
    """
    if name not in _REGISTRY:
        raise ConfigError(f"no advantage estimator named {name!r}; registered: "
                          f"{', '.join(estimator_names())}{did_you_mean(name, _REGISTRY)}")
    return _REGISTRY[name]


def options_class(name: str) -> type[EstimatorOptions]:
    """The options dataclass of estimator ``name`` (raises ConfigError if unknown)."""
    return estimator_info(name).options


def get_estimator(name: str, **options: Any) -> Estimator:
    """The estimator ``name`` configured with typed ``options``.

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> get_estimator("grpo", mode="mean_norm")([])
        {}

    Raises:
        ConfigError: Unknown name or option, or an invalid option value.
    """
    cls = options_class(name)
    accepted = [f.name for f in fields(cls)]
    for key in options:
        if key not in accepted:
            raise ConfigError(f"estimator {name!r} has no option {key!r}; accepted: "
                              f"{', '.join(accepted)}{did_you_mean(key, accepted)}")
    opts, factory = cls(**options), _REGISTRY[name].factory
    return factory(opts) if isinstance(factory, type) else functools.partial(factory, options=opts)


def returns_to_go(rewards: Sequence[float] | np.ndarray, gamma: float) -> np.ndarray:
    """``(T,)`` G_t = r_t + γ·G_{t+1}, G_{T-1} = r_{T-1}; no bootstrap."""
    out, acc = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[t]) + gamma * acc
        out[t] = acc
    return np.asarray(out, dtype=np.float64)


def step_scores(traj: Trajectory, invalid_penalty: float) -> np.ndarray:
    """``(T,)`` r_t (``None`` as 0) − λ·1[¬valid_t]: λ on the step's own score only."""
    return np.array([(s.result.reward or 0.0) - (0.0 if s.valid else invalid_penalty)
                     for s in traj.steps], dtype=np.float64)


def outcome_score(traj: Trajectory) -> float:
    """R_i of a scorable trajectory (module docstring); λ is applied per step, not here."""
    return float(traj.with_outcome().outcome_reward)  # type: ignore[arg-type]


def normalize(values: np.ndarray, labels: np.ndarray, *, mode: str, ddof: int) -> np.ndarray:
    """Normalize ``values`` within each label: x − mean, and / (std + ε) in ``mean_std_norm``.

    Args:
        values: ``(n,)`` one entry per member.
        labels: ``(n,)`` dense int ids of the statistic each member belongs to.
        mode: ``mean_std_norm`` or ``mean_norm``.
        ddof: 1 for the unbiased std, 0 for the population std.

    Returns:
        ``(n,)`` normalized values; 0 for members of a label with fewer than 2 members.
    """
    count = np.bincount(labels)  # (L,) members per label
    # Shift each label by one member's value: equal members then deviate by exactly 0, where
    # rounding of a large mean (1e6 + 0.95) would leave ~1e-10, i.e. 1e-4 after / (0 + ε).
    present, first = np.unique(labels, return_index=True)
    shift = np.zeros(len(count))
    shift[present] = values[first]  # (L,)
    x = values - shift[labels]  # (n,)
    dev = x - (np.bincount(labels, x) / np.maximum(count, 1))[labels]  # (n,) x − mean
    if mode == "mean_std_norm":
        var = np.bincount(labels, dev * dev) / np.maximum(count - ddof, 1)  # (L,) two-pass
        dev = dev / (np.sqrt(var)[labels] + EPS)
    return np.where(count[labels] >= 2, dev, 0.0)


@dataclass(frozen=True)
class Flat:
    """Scorable trajectories flattened for vectorized math: N trajectories, S steps in all."""

    ids: tuple[str, ...]  # (N,) trajectory ids
    group: np.ndarray  # (N,) int index of each trajectory's group in the input
    outcome: np.ndarray  # (N,) R_i
    lengths: np.ndarray  # (N,) steps per trajectory
    active: np.ndarray  # (N,) bool: its group has >= 2 scorable trajectories (else all 0)
    step_traj: np.ndarray  # (S,) int index of each step's trajectory
    penalty: np.ndarray  # (S,) λ·1[¬valid_t]
    returns: np.ndarray  # (S,) G_t − λ·1[¬valid_t]: the penalty on the step's own return only
    steps: tuple[Step, ...]  # (S,) the steps themselves (state keys, actions)


def flatten(groups: Sequence[Group], *, gamma: float, invalid_penalty: float) -> Flat:
    """Flatten the scorable trajectories of ``groups``; duplicate ids raise SchemaError."""
    ids: list[str] = []
    group, outcome, lengths, active, returns = [], [], [], [], []
    steps: list[Step] = []
    for g, grp in enumerate(groups):
        scorable = grp.scorable
        for traj in scorable:
            ids.append(traj.id)
            group.append(g)
            outcome.append(outcome_score(traj))
            lengths.append(len(traj.steps))
            active.append(len(scorable) >= 2)
            returns.append(returns_to_go([s.result.reward or 0.0 for s in traj.steps], gamma))
            steps.extend(traj.steps)
    if len(set(ids)) != len(ids):
        raise SchemaError("trajectory ids must be unique across groups; repeated: "
                          f"{sorted({i for i in ids if ids.count(i) > 1})}")
    penalty = invalid_penalty * np.fromiter((not s.valid for s in steps), bool, len(steps))
    lens = np.asarray(lengths, dtype=np.int64)
    return Flat(ids=tuple(ids), group=np.asarray(group, dtype=np.int64),
                outcome=np.asarray(outcome, dtype=np.float64), lengths=lens,
                active=np.asarray(active, dtype=bool),
                step_traj=np.repeat(np.arange(len(ids)), lens),
                penalty=penalty.astype(np.float64),
                returns=(np.concatenate(returns) if returns else np.zeros(0)) - penalty,
                steps=tuple(steps))


PenaltyPlacement = Literal["own", "before_stats"]
"""Where λ goes in a trajectory-level term: ``own`` = after the statistics, on the invalid
step only (the spec); ``before_stats`` = into that step's entry R_i − λ, inside the group
statistics, as verl-agent does (a compatibility mode)."""


def step_entry_advantages(flat: Flat, mode: str, *, cross_steps: bool,
                          placement: PenaltyPlacement, leave_one_out: bool = False
                          ) -> np.ndarray:
    """``(S,)`` outcome advantages from per-step entries, verl-agent's layout, λ included.

    Every step has the score x_{i,t} = R_i (less λ·1[¬valid_t] with ``before_stats``). The
    group statistics run over every step's score with ``cross_steps`` (verl-agent's
    ``compute_mean_std_cross_steps``), else over each trajectory's first step only (the
    first record verl-agent sees of it). A_{i,t} = (x_{i,t} − mean)/(std + ε) (unbiased std;
    ``mean_norm`` drops the division), times n/(n − 1) with ``leave_one_out`` (RLOO over the
    n entries); with ``own`` λ is then taken from the invalid step.

    Args:
        flat: The flattened groups.
        mode: ``mean_std_norm`` or ``mean_norm``.
        cross_steps: One statistics entry per step record instead of per trajectory.
        placement: Where λ goes (:data:`PenaltyPlacement`).
        leave_one_out: RLOO's n/(n − 1) scale.

    Returns:
        One value per step; entries of groups with < 2 entries give 0.
    """
    x = flat.outcome[flat.step_traj] - (flat.penalty if placement == "before_stats" else 0.0)
    label = flat.group[flat.step_traj]  # (S,)
    entry = np.ones(len(x), bool)
    if not cross_steps:
        entry[:] = False
        entry[(np.cumsum(flat.lengths) - flat.lengths)[flat.lengths > 0]] = True
    n_labels = int(label.max()) + 1 if len(label) else 0
    count = np.bincount(label[entry], minlength=n_labels)  # (L,) entries per group
    # shift by one entry's value: equal entries then deviate by exactly 0 (see normalize)
    shift = np.zeros(n_labels)
    shift[label[entry][::-1]] = x[entry][::-1]
    y = x - shift[label]
    mean = np.bincount(label[entry], y[entry], minlength=n_labels) / np.maximum(count, 1)
    dev = y - mean[label]
    if mode == "mean_std_norm":
        var = np.bincount(label[entry], dev[entry] ** 2, minlength=n_labels) / np.maximum(
            count - 1, 1)
        dev = dev / (np.sqrt(var)[label] + EPS)
    if leave_one_out:
        dev = dev * (count / np.maximum(count - 1, 1))[label]
    out = np.where(count[label] >= 2, dev, 0.0)
    return out - (flat.penalty if placement == "own" else 0.0)


def broadcast(flat: Flat, traj_values: np.ndarray) -> np.ndarray:
    """``(S,)`` A_{i,t} = A_i − λ·1[¬valid_t]: each step gets its trajectory's value."""
    return traj_values[flat.step_traj] - flat.penalty


def unflatten(flat: Flat, step_values: np.ndarray) -> Advantages:
    """Split ``(S,)`` step values per trajectory; groups with < 2 scorable get zeros."""
    values = np.where(flat.active[flat.step_traj], step_values, 0.0)  # (S,)
    parts = np.split(values, np.cumsum(flat.lengths)[:-1]) if len(flat.ids) else []
    return {i: p.astype(np.float64, copy=True) for i, p in zip(flat.ids, parts, strict=True)}


@dataclass(frozen=True)
class OutcomeOptions(EstimatorOptions):
    """Options of GRPO and RLOO: the shared ones plus verl-agent's compatibility switches."""

    cross_steps: bool = False
    """verl-agent's ``compute_mean_std_cross_steps``: one statistics entry per step record
    (long trajectories weigh more; RLOO leaves one record out); False = one entry per
    trajectory (the papers)."""
    penalty_placement: PenaltyPlacement = "own"
    """``own``: λ after the statistics, on the invalid step (spec); ``before_stats``: inside
    the step's entry R_i − λ, as verl-agent (``base.PenaltyPlacement``)."""


def outcome_advantages(groups: Sequence[Group], options: OutcomeOptions,
                       per_trajectory: Callable[[Flat, str], np.ndarray], *,
                       leave_one_out: bool) -> Advantages:
    """A group-baseline estimator's advantages (GRPO, RLOO), one per step.

    Every step of trajectory i gets ``per_trajectory``'s A_i less its own λ
    (:func:`broadcast`); ``cross_steps`` or the ``before_stats`` placement switch to
    verl-agent's per-step entries (:func:`step_entry_advantages`, scaled by n/(n − 1) with
    ``leave_one_out``).
    """
    flat = flatten(groups, gamma=options.gamma, invalid_penalty=options.invalid_penalty)
    if options.cross_steps or options.penalty_placement != "own":  # verl-agent's layout
        return unflatten(flat, step_entry_advantages(
            flat, options.mode, cross_steps=options.cross_steps,
            placement=options.penalty_placement, leave_one_out=leave_one_out))
    adv = per_trajectory(flat, options.mode)  # (N,)
    return unflatten(flat, broadcast(flat, adv))  # (S,) → per trajectory
