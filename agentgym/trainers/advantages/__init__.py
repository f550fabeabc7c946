"""Advantage estimators: pure numpy functions from task groups to per-step advantages.

    >>> from agentgym.trainers.advantages import estimator_names, get_estimator
    >>> {"grpo", "rloo", "gigpo", "hgpo", "salt"} <= set(estimator_names())
    True
    >>> estimate = get_estimator("gigpo", step_weight=0.5)  # estimate(groups) -> {id: (T,)}

Conventions shared by every estimator are in ``base``; each algorithm is one file opening
with its equation, paper and choices. Adding an algorithm = adding a file that uses
``@register_estimator`` (with its level and needs, see ``EstimatorInfo``): every module of
this package is imported on first use, and other packages register theirs through the
entry-point group ``agentgym.estimators``.

This module also holds the JSONL input/output of ``agentgym advantages``: ``load_minimal``
reads trajectories, ``advantages_jsonl`` writes ``{"id": ..., "advantages": [...]}`` lines.

Minimal input form (``load_minimal``), one JSON object a line, for computing advantages on
data not written by agentgym::

    {"id": "t1", "group_id": "task-3", "status": "terminated", "outcome_reward": 1.0,
     "steps": [{"state_key": "s0", "reward": 0.0, "valid": true, "action": "go north"}]}

``id`` and one of ``task_id``/``group_id`` are required (each defaults to the other);
``status`` defaults to ``terminated``; ``outcome_reward`` to null (R_i then follows the
rule in ``base``); ``steps`` to none. Step fields are all optional: ``state_key`` (null =
matches nothing), ``reward`` (null = not scored), ``valid`` (true), ``action`` (text, a
message object, or a tool call ``{"name": ..., "arguments": {...}}``). Unknown fields are
rejected. Full trajectory lines (with ``schema_version``) may be mixed in; trajectories are
grouped by ``group_id``.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import SchemaError, did_you_mean
from agentgym.trainers.advantages.base import (
    EPS,
    Advantages,
    Estimator,
    EstimatorInfo,
    EstimatorOptions,
    Mode,
    estimator_info,
    estimator_names,
    get_estimator,
    normalize,
    options_class,
    outcome_score,
    parse_options,
    register_estimator,
    returns_to_go,
    step_scores,
)
from agentgym.trainers.advantages.gigpo import GiGPO, GiGPOOptions
from agentgym.trainers.advantages.grpo import GRPO, GRPOOptions
from agentgym.trainers.advantages.hgpo import HGPO, HGPOOptions
from agentgym.trainers.advantages.rloo import RLOO, RLOOOptions
from agentgym.trainers.advantages.salt import SALT, SALTOptions
from agentgym.types import Group, Message, Step, StepResult, ToolCall, Trajectory


def _register_all() -> None:
    """Import every estimator module here, then the ``agentgym.estimators`` entry points."""
    from importlib.metadata import entry_points

    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")
    for ep in entry_points(group="agentgym.estimators"):
        try:
            ep.load()
        except Exception as exc:  # a broken plug-in must not hide the built-in estimators
            warnings.warn(f"estimator plug-in {ep.name!r} ({ep.value}) failed to load: {exc!r}",
                          stacklevel=2)


_register_all()

__all__ = [
    "EPS", "Advantages", "Estimator", "EstimatorInfo", "EstimatorOptions", "GRPO", "GRPOOptions",
    "GiGPO", "GiGPOOptions", "HGPO", "HGPOOptions", "Mode", "RLOO", "RLOOOptions", "SALT",
    "SALTOptions", "advantages_jsonl", "estimator_info", "estimator_names",
    "get_estimator", "load_minimal", "normalize", "options_class", "outcome_score",
    "parse_options", "register_estimator", "returns_to_go", "step_scores",
]


def advantages_jsonl(groups: Sequence[Group], estimator: Estimator) -> Iterator[str]:
    """``{"id": ..., "advantages": [...]}`` lines, one per scorable trajectory, input order."""
    for traj_id, adv in estimator(groups).items():
        yield json.dumps({"id": traj_id, "advantages": adv.tolist()})


_MIN_KEYS = {"id", "task_id", "group_id", "status", "outcome_reward", "steps"}
_MIN_STEP_KEYS = {"state_key", "reward", "valid", "action"}


def _fields(where: str, data: Any, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise SchemaError(f"a minimal {where} must be a JSON object, got {type(data).__name__}")
    for key in sorted(set(data) - allowed):
        raise SchemaError(f"minimal {where} has unknown field {key!r}; allowed: "
                          f"{sorted(allowed)}{did_you_mean(key, allowed)}")
    return data


def _action(value: Any, index: int) -> Message:
    if isinstance(value, Mapping) and "role" in value:
        return Message.from_dict(value)
    if isinstance(value, Mapping):
        if "name" not in value:
            raise SchemaError("an action object needs 'name' (a tool call) or 'role' (a message)")
        call = ToolCall(str(index), value["name"], dict(value.get("arguments") or {}))
        return Message("assistant", tool_calls=(call,))
    return Message("assistant", "" if value is None else str(value))


def _minimal(data: Any) -> Trajectory:
    data = _fields("trajectory", data, _MIN_KEYS)
    if "id" not in data or not ({"task_id", "group_id"} & set(data)):
        raise SchemaError("a minimal trajectory needs 'id' and 'task_id' or 'group_id'")
    steps = []
    for k, raw in enumerate(data.get("steps") or ()):
        s = _fields(f"step {k}", raw, _MIN_STEP_KEYS)
        steps.append(Step(k, _action(s.get("action"), k), StepResult((), s.get("reward")),
                          state_key=s.get("state_key"), valid=bool(s.get("valid", True))))
    task = data.get("task_id", data.get("group_id"))
    return Trajectory(id=str(data["id"]), task_id=task, group_id=data.get("group_id", task),
                      prompt=(), steps=tuple(steps), status=data.get("status", "terminated"),
                      outcome_reward=data.get("outcome_reward"))


def load_minimal(path: str | os.PathLike[str]) -> list[Group]:
    """Groups from a JSONL file of full and/or minimal trajectories (module docstring).

    Raises:
        FileNotFoundError: No file at ``path``.
        SchemaError: A bad line, naming its number.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no trajectory file at {str(path)!r}")
    trajs = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                full = isinstance(data, Mapping) and "schema_version" in data
                trajs.append(Trajectory.from_dict(data) if full else _minimal(data))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise SchemaError(f"{path}:{number}: {exc}") from exc
    try:
        return Group.from_trajectories(trajs)
    except ValueError as exc:  # rollouts of one group_id naming different tasks
        raise SchemaError(f"{path}: {exc}") from exc
