"""Core records: messages, tool calls, steps, trajectories and groups.

Every record is a frozen dataclass with ``to_dict``/``from_dict`` so that trajectories
round-trip through JSON exactly (see ``docs/trajectory-schema.md``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agentgym.errors import SchemaError

SCHEMA_VERSION = 1
"""Version of the trajectory JSONL schema; bumped whenever a field changes meaning."""

Role = Literal["system", "user", "assistant", "tool"]
Status = Literal["terminated", "truncated", "error"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
STATUSES: tuple[str, ...] = ("terminated", "truncated", "error")


def _require(data: Mapping[str, Any], key: str, kind: str) -> Any:
    if not isinstance(data, Mapping):
        raise SchemaError(f"expected a JSON object for {kind}, got {type(data).__name__}")
    if key not in data:
        raise SchemaError(f"{kind} is missing the field {key!r}; it has {sorted(data)}")
    return data[key]


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool by the model.

    Attributes:
        id: Call id, echoed by the tool message that answers it.
        name: Tool name.
        arguments: Parsed JSON arguments (a JSON object).
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    # The constructor checks nothing on purpose: a call is a record of what an agent sent,
    # and an agent's mistake (a name that is not text, arguments that are not an object) must
    # reach the env, which answers it as an invalid action, and be recorded as sent.
    def problem(self) -> str | None:
        """Why no tool can run this call, or None when it is well formed.

        Malformed: a name that is not a string, arguments that are not a mapping with string
        keys. Envs answer such a call as an invalid action (``valid=False``), never raise.

        Example:
            >>> ToolCall("c0", "add", '{"a": 1}').problem()
            'the arguments of add must be a JSON object, got str'
        """
        if not isinstance(self.name, str):
            return (f"a tool call's name must be a string, got {type(self.name).__name__} "
                    f"{_short_repr(self.name)}")
        if not isinstance(self.arguments, Mapping):
            return (f"the arguments of {self.name[:100]} must be a JSON object, got "
                    f"{type(self.arguments).__name__}")
        for key in self.arguments:
            if not isinstance(key, str):
                return (f"the arguments of {self.name[:100]} must be a JSON object, whose keys "
                        f"are strings; got the key {_short_repr(key)}")
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form.

        A malformed name or arguments (:meth:`problem`) is written as the nearest JSON value,
        so a trajectory that records a user's malformed call can still be written.
        """
        if self.problem() is None:
            return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}
        return {"id": _jsonable(self.id), "name": _jsonable(self.name),
                "arguments": _jsonable(self.arguments)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """Inverse of :meth:`to_dict`; missing arguments read as ``{}``."""
        args = data.get("arguments", {}) if isinstance(data, Mapping) else {}
        return cls(
            id=_require(data, "id", "ToolCall"),
            name=_require(data, "name", "ToolCall"),
            # a malformed call stays malformed, so a recorded invalid action reads back as sent
            arguments=dict(args) if isinstance(args, Mapping) else args,
        )


@dataclass(frozen=True)
class Message:
    """One chat message.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: Text content (may be empty for an assistant message holding only tool calls).
        tool_calls: Tool calls made by an assistant message.
        tool_call_id: For ``tool`` messages, the id of the call this answers.
        name: For ``tool`` messages, the tool's name (chat templates use it).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"content must be str, got {type(self.content).__name__}")
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; optional fields are omitted when empty."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`."""
        return cls(
            role=_require(data, "role", "Message"),
            content=data.get("content") or "",
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )

    def to_chat(self) -> dict[str, Any]:
        """The OpenAI / Hugging Face chat-template form of this message."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": dict(c.arguments)}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: name, description and JSON-schema parameters.

    ``to_openai()`` gives the ``{"type": "function", "function": {...}}`` form that chat
    templates (``tools=``) and OpenAI-compatible servers accept.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def to_openai(self) -> dict[str, Any]:
        """OpenAI function-tool form."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description,
                         "parameters": dict(self.parameters)},
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "description": self.description,
                "parameters": dict(self.parameters)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolSpec:
        """Inverse of :meth:`to_dict`; also accepts the OpenAI ``{"function": ...}`` form."""
        if "function" in data:
            data = data["function"]
        return cls(
            name=_require(data, "name", "ToolSpec"),
            description=data.get("description", ""),
            parameters=dict(data.get("parameters") or {"type": "object", "properties": {}}),
        )


@dataclass(frozen=True)
class StepResult:
    """What the env returns for one action: Gymnasium's 5-tuple with names.

    Attributes:
        observation: Messages the model reads next (tool results, a user turn, ...).
        reward: Reward for this step; ``None`` means "not scored here", never a stand-in 0.
        terminated: The episode reached a terminal state of the task (success or failure).
        truncated: The episode was cut short from outside the task (turn limit, budget).
        info: Extra facts. Keys the framework reads: ``valid`` (bool, default True: the
            action was parsed and executed), ``state_key`` (fingerprint of the new state),
            ``outcome_reward`` (a separate final score, on the last step).
    """

    observation: tuple[Message, ...]
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.observation, tuple):
            object.__setattr__(self, "observation", tuple(self.observation))
        if self.reward is not None and not math.isfinite(float(self.reward)):
            raise ValueError(f"reward must be a finite float or None, got {self.reward!r}")

    @property
    def done(self) -> bool:
        """Whether the episode ended (terminated or truncated)."""
        return self.terminated or self.truncated

    @property
    def valid(self) -> bool:
        """Whether the env accepted the action (``info["valid"]``, default True)."""
        return bool(self.info.get("valid", True))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "observation": [m.to_dict() for m in self.observation],
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "info": _jsonable(self.info),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepResult:
        """Inverse of :meth:`to_dict`."""
        return cls(
            observation=tuple(Message.from_dict(m) for m in _require(data, "observation",
                                                                      "StepResult")),
            reward=data.get("reward"),
            terminated=bool(data.get("terminated", False)),
            truncated=bool(data.get("truncated", False)),
            info=dict(data.get("info") or {}),
        )


@dataclass(frozen=True)
class StepTokens:
    """The exact tokens of one policy call, recorded at sampling time.

    Attributes:
        prompt_ids: Token ids of the context the policy saw.
        completion_ids: Token ids the policy sampled.
        logprobs: Behaviour log-probability of each completion token (same length).
        policy_version: Version of the weights that sampled the completion, when known
            (async training measures staleness with it).
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...] = ()
    policy_version: int | None = None

    def __post_init__(self) -> None:
        for name in ("prompt_ids", "completion_ids", "logprobs"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.logprobs and len(self.logprobs) != len(self.completion_ids):
            raise ValueError(
                f"logprobs has {len(self.logprobs)} entries but completion_ids has "
                f"{len(self.completion_ids)}; record one log-prob per sampled token"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {"prompt_ids": list(self.prompt_ids), "completion_ids": list(self.completion_ids),
               "logprobs": list(self.logprobs)}
        if self.policy_version is not None:  # omitted when unknown: older files stay identical
            out["policy_version"] = self.policy_version
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepTokens:
        """Inverse of :meth:`to_dict`."""
        return cls(
            prompt_ids=tuple(_require(data, "prompt_ids", "StepTokens")),
            completion_ids=tuple(_require(data, "completion_ids", "StepTokens")),
            logprobs=tuple(data.get("logprobs") or ()),
            policy_version=data.get("policy_version"),
        )


@dataclass(frozen=True)
class Step:
    """One agent turn: one policy call (which may hold several tool calls) and its result.

    Attributes:
        index: Position in the trajectory, from 0.
        action: The assistant message the policy produced.
        result: What the env returned.
        tokens: Exact tokens of the policy call, if the backend recorded them.
        state_key: The env's fingerprint of the state *before* the action.
        valid: False when the action could not be parsed or executed.
        summary: True for a SUPO summary turn: a policy call that did not go to the env
            (``result`` then holds the next working context's continuation message).
    """

    index: int
    action: Message
    result: StepResult
    tokens: StepTokens | None = None
    state_key: str | None = None
    valid: bool = True
    summary: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "index": self.index,
            "action": self.action.to_dict(),
            "result": self.result.to_dict(),
            "tokens": None if self.tokens is None else self.tokens.to_dict(),
            "state_key": self.state_key,
            "valid": self.valid,
            **({"summary": True} if self.summary else {}),  # omitted when False (older files)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        """Inverse of :meth:`to_dict`."""
        tokens = data.get("tokens")
        return cls(
            index=int(_require(data, "index", "Step")),
            action=Message.from_dict(_require(data, "action", "Step")),
            result=StepResult.from_dict(_require(data, "result", "Step")),
            tokens=None if tokens is None else StepTokens.from_dict(tokens),
            state_key=data.get("state_key"),
            valid=bool(data.get("valid", True)),
            summary=bool(data.get("summary", False)),
        )


@dataclass(frozen=True)
class Trajectory:
    """One episode.

    Attributes:
        id: Unique id of this rollout.
        task_id: Id of the task (same for every rollout of a group).
        group_id: Id of the group of rollouts started from the same initial state.
        prompt: Messages returned by ``reset`` (the task as the model first sees it).
        steps: The agent's turns, in order.
        status: ``terminated``, ``truncated`` or ``error`` (an infrastructure fault).
        outcome_reward: Final score; ``None`` for ``error`` trajectories.
        error: What went wrong, for ``error`` trajectories.
        metrics: Free-form numbers (wall time, tokens, ...).
        env_id: Registered id of the env, when known.
        seed: Seed passed to ``reset``, when known.
        tools: Tools offered to the model.
    """

    id: str
    task_id: str
    group_id: str
    prompt: tuple[Message, ...]
    steps: tuple[Step, ...] = ()
    status: Status = "terminated"
    outcome_reward: float | None = None
    error: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    env_id: str | None = None
    seed: int | None = None
    tools: tuple[ToolSpec, ...] = ()

    def __post_init__(self) -> None:
        for name in ("prompt", "steps", "tools"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.status == "error" and self.outcome_reward is not None:
            raise ValueError(
                "an error trajectory is unscorable: its outcome_reward must be None, got "
                f"{self.outcome_reward!r}"
            )
        if self.outcome_reward is not None and not math.isfinite(float(self.outcome_reward)):
            raise ValueError(f"outcome_reward must be a finite float or None, got "
                             f"{self.outcome_reward!r}; an unscorable episode is "
                             "status='error' with outcome_reward=None")

    @property
    def scorable(self) -> bool:
        """Whether this trajectory may enter baselines and the loss."""
        return self.status != "error"

    @property
    def step_rewards(self) -> tuple[float | None, ...]:
        """Reward of each step (``None`` where the env did not score)."""
        return tuple(s.result.reward for s in self.steps)

    def with_outcome(self) -> Trajectory:
        """Fill ``outcome_reward`` by the shared rule unless it is set or unscorable.

        The last step's ``info["outcome_reward"]`` wins when the env reports one; otherwise
        the outcome is the sum of step rewards (``None`` counted as 0).
        """
        if not self.scorable or self.outcome_reward is not None:
            return self
        reported = self.steps[-1].result.info.get("outcome_reward") if self.steps else None
        total = float(reported) if reported is not None else float(
            sum(r for r in self.step_rewards if r is not None)
        )
        return replace(self, outcome_reward=total)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the schema version."""
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "env_id": self.env_id,
            "seed": self.seed,
            "status": self.status,
            "outcome_reward": self.outcome_reward,
            "error": self.error,
            "prompt": [m.to_dict() for m in self.prompt],
            "tools": [t.to_dict() for t in self.tools],
            "steps": [s.to_dict() for s in self.steps],
            "metrics": _jsonable(self.metrics),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        """Inverse of :meth:`to_dict`; rejects unknown schema versions."""
        version = _require(data, "schema_version", "Trajectory")
        if version != SCHEMA_VERSION:
            raise SchemaError(
                f"trajectory schema_version {version!r} is not supported (this agentgym reads "
                f"version {SCHEMA_VERSION}); write the file with a matching agentgym version"
            )
        return cls(
            id=_require(data, "id", "Trajectory"),
            task_id=_require(data, "task_id", "Trajectory"),
            group_id=_require(data, "group_id", "Trajectory"),
            prompt=tuple(Message.from_dict(m) for m in _require(data, "prompt", "Trajectory")),
            steps=tuple(Step.from_dict(s) for s in data.get("steps") or ()),
            status=_require(data, "status", "Trajectory"),
            outcome_reward=data.get("outcome_reward"),
            error=data.get("error"),
            metrics=dict(data.get("metrics") or {}),
            env_id=data.get("env_id"),
            seed=data.get("seed"),
            tools=tuple(ToolSpec.from_dict(t) for t in data.get("tools") or ()),
        )

    def to_json(self) -> str:
        """One JSONL line (no trailing newline), always encodable as UTF-8."""
        data = self.to_dict()
        line = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: escape them (they still round-trip)
            line = json.dumps(data, separators=(",", ":"))
        return line

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        """Parse one JSONL line.

        Raises:
            SchemaError: The line is not JSON, is nested too deeply, holds a number too long
                to read or a NaN/Infinity, or does not match the schema.
        """
        from agentgym.jsonl import loads_strict  # jsonl imports this module

        try:
            data = loads_strict(line)
        except SchemaError as exc:
            raise SchemaError(f"not a JSON trajectory line: {exc}") from None
        return cls.from_dict(data)


@dataclass(frozen=True)
class Group:
    """G rollouts of one task from the same initial state.

    Attributes:
        task_id: The shared task.
        trajectories: The rollouts, scorable or not.
    """

    task_id: str
    trajectories: tuple[Trajectory, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.trajectories, tuple):
            object.__setattr__(self, "trajectories", tuple(self.trajectories))
        # An error trajectory may have failed before its env named the task.
        others = {t.task_id for t in self.trajectories if t.scorable} - {self.task_id}
        if others:
            raise ValueError(
                f"every trajectory of group {self.task_id!r} must share its task_id; "
                f"found {sorted(others)}"
            )

    @property
    def scorable(self) -> tuple[Trajectory, ...]:
        """Trajectories that may enter baselines (status != error)."""
        return tuple(t for t in self.trajectories if t.scorable)

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory]) -> list[Group]:
        """Split trajectories into groups by ``group_id``, keeping first-seen order."""
        by_group: dict[str, list[Trajectory]] = {}
        for traj in trajectories:
            by_group.setdefault(traj.group_id, []).append(traj)
        return [cls(next((t.task_id for t in ts if t.scorable), ts[0].task_id), tuple(ts))
                for ts in by_group.values()]


def _short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises (a hostile ``__repr__``)."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _jsonable(value: Any) -> Any:
    """Best-effort conversion of info/metrics values to JSON types (numpy scalars, tuples)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return repr(value)
