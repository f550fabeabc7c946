"""Tools: Python functions the model can call.

``@tool`` turns a typed, Google-style-documented function into a :class:`Tool` whose
:class:`~agentgym.types.ToolSpec` matches ``transformers.utils.get_json_schema`` (a test
checks this), without importing transformers. A :class:`ToolBox` runs an assistant message's
tool calls: it parses them from text when the backend gave none, validates the arguments
against the JSON schema, calls the functions with per-call timeouts, and turns every agent
mistake into a tool message with ``valid=False``, never an exception.
"""

from __future__ import annotations

import asyncio
import decimal
import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

import jsonschema

from agentgym.errors import ConfigError, did_you_mean
from agentgym.types import Message, ToolCall, ToolSpec

# -- JSON schema from a signature ----------------------------------------------------------
_SIMPLE = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null",
           Any: None}
_DESC_RE = re.compile(r"^(.*?)[\n\s]*(Args:|Returns:|Raises:|\Z)", re.DOTALL)
_ARG_RE = re.compile(r"^\s{0,8}(\w+)\s*(?:\([^)]*\))?:\s*(.*?)\s*$")
_CHOICES_RE = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)


def _type_schema(hint: Any) -> dict[str, Any]:
    """JSON schema of one type hint, in get_json_schema's dialect."""
    if hint in _SIMPLE:
        return {} if _SIMPLE[hint] is None else {"type": _SIMPLE[hint]}
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        if not all(type(a) in _SIMPLE for a in args):
            raise ConfigError(f"Literal values must be int, float, str, bool or None, got {hint!r}")
        # like get_json_schema: each JSON type once, in order of first appearance
        kinds = list(dict.fromkeys(_SIMPLE[type(a)] for a in args))
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        parts = [_type_schema(a) for a in non_null]
        out: dict[str, Any]
        if len(parts) == 1:
            out = dict(parts[0])
        elif all(set(p) == {"type"} and isinstance(p["type"], str) for p in parts):
            kinds = sorted({p["type"] for p in parts})  # get_json_schema sorts and dedupes
            out = {"type": kinds[0] if len(kinds) == 1 else kinds}
        else:
            out = {"anyOf": parts}
        if len(non_null) < len(args):
            out["nullable"] = True
        return out
    if origin in (list, Sequence, set, frozenset) or hint in (list, set):
        return {"type": "array", **({"items": _type_schema(args[0])} if args else {})}
    if origin is tuple or hint is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0])}
        return {"type": "array", **({"prefixItems": [_type_schema(a) for a in args]}
                                    if args else {})}
    if origin in (dict, Mapping) or hint is dict:
        return {"type": "object",
                **({"additionalProperties": _type_schema(args[1])} if len(args) == 2 else {})}
    raise ConfigError(
        f"cannot express the type hint {hint!r} as JSON schema; use int, float, str, bool, "
        "list[...], dict[str, ...], Literal[...] or a union of these"
    )


def _parse_docstring(doc: str) -> tuple[str, dict[str, str], str | None]:
    """Description, per-argument descriptions and the Returns text of a Google docstring."""
    doc = inspect.cleandoc(doc)
    match = _DESC_RE.search(doc)
    description = match.group(1).strip() if match else doc.strip()
    args: dict[str, str] = {}
    block = re.search(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", "\n" + doc, re.DOTALL)
    if block:
        current, base_indent = None, 0
        for line in block.group(1).splitlines():
            m = _ARG_RE.match(line)
            indent = len(line) - len(line.lstrip())
            if m and (current is None or indent <= base_indent):
                current, base_indent = m.group(1), indent
                args[current] = m.group(2)
            elif current is not None and line.strip():
                args[current] = (args[current] + " " + line.strip()).strip()
    ret = re.search(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(Raises:|\Z)", "\n" + doc, re.DOTALL)
    return description, args, (ret.group(1).strip() if ret else None)


def function_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """The ``{"type": "function", "function": {...}}`` schema of a typed, documented function.

    Raises:
        ConfigError: the function has no docstring or a parameter lacks a type hint.
    """
    name = func.__name__
    if not inspect.getdoc(func):
        raise ConfigError(
            f"tool {name!r} has no docstring; the model reads it to know what the tool does. "
            "Add a Google-style docstring with a summary line and an Args: section"
        )
    description, arg_docs, returns = _parse_docstring(inspect.getdoc(func) or "")
    hints = typing.get_type_hints(func)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.name in _INJECTED:
            continue
        if param.name not in hints:
            raise ConfigError(
                f"tool {name!r}: parameter {param.name!r} has no type hint; add one "
                f"(e.g. `{param.name}: str`) so its JSON schema can be built"
            )
        prop = _type_schema(hints[param.name])
        if param.name in arg_docs:
            desc = arg_docs[param.name]
            choices = _CHOICES_RE.search(desc)
            if choices:  # get_json_schema reads "(choices: [...])" at the end into an enum
                try:
                    values = json.loads(choices.group(1))
                except json.JSONDecodeError as exc:
                    raise ConfigError(
                        f"tool {name!r}: the choices of {param.name!r} are not a JSON list: "
                        f"{choices.group(1)!r}"
                    ) from exc
                prop["enum"] = [c.strip() if isinstance(c, str) else c for c in values]
                desc = desc[: choices.start()].strip()
            prop["description"] = desc
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    schema: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if "return" in hints:
        try:
            schema["return"] = _type_schema(hints["return"])
        except ConfigError:  # the model never writes the return value; leave it out
            pass
        else:
            if returns is not None:
                schema["return"]["description"] = returns
    return {"type": "function", "function": schema}


# -- tools and the tool box ----------------------------------------------------------------
_INJECTED = frozenset({"state"})
"""Parameter names the ToolBox fills itself (per-episode state), hidden from the model."""


@dataclass(frozen=True)
class Tool:
    """A callable tool and its spec.

    Attributes:
        fn: The function (sync or async). A parameter named ``state`` receives the
            episode's state object and is hidden from the model.
        spec: Name, description and JSON-schema parameters.
        timeout: Seconds one call may take. An async tool is cancelled when it runs over;
            a sync tool runs on the event loop and cannot be interrupted, so a tool that may
            block should be async (e.g. wrap the work in ``asyncio.to_thread``).
    """

    fn: Callable[..., Any]
    spec: ToolSpec
    timeout: float = 30.0

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (no validation, no timeout)."""
        return self.fn(*args, **kwargs)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         timeout: float = 30.0) -> Any:
    """Make a :class:`Tool` from a typed function with a Google-style docstring.

    Example:
        >>> @tool
        ... def add(a: int, b: int) -> int:
        ...     '''Add two integers.
        ...
        ...     Args:
        ...         a: The first.
        ...         b: The second.
        ...     '''
        ...     return a + b
        >>> add.spec.parameters["required"]
        ['a', 'b']
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        schema = function_schema(f)["function"]
        return Tool(f, ToolSpec(name or schema["name"], schema["description"],
                                schema["parameters"]), timeout)

    return wrap(fn) if fn is not None else wrap


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    """A :class:`Tool` from a tool or a plain documented function."""
    return obj if isinstance(obj, Tool) else tool(obj)


@dataclass(frozen=True)
class ToolOutcome:
    """What running an assistant message's tool calls gave.

    Attributes:
        messages: One tool message per call, then one user message naming the blocks that
            could not be parsed, if any (only that message when there was no call).
        calls: The calls, in order, one per tool message; a malformed structured call (see
            :meth:`~agentgym.types.ToolCall.problem`) is given as :func:`readable_call` makes it.
        valid: False when any call failed to parse, validate or run.
        results: Return values of the calls that ran (``None`` for failed calls).
    """

    messages: tuple[Message, ...]
    calls: tuple[ToolCall, ...]
    valid: bool
    results: tuple[Any, ...] = field(default=())


class ToolBox:
    """Runs tool calls against a set of tools; agent mistakes become observations.

    Args:
        tools: Tools or documented functions.
        parser: Text formats to parse calls from when the message has no structured calls
            (default: every family, ``agentgym.parsing.DEFAULT_FORMATS``); see
            :func:`agentgym.parsing.parse_tool_calls`.
        max_output_chars: Tool results longer than this are cut with a marker.
        max_calls: Most calls run from one message; the rest get an error observation.
    """

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]], *,
                 parser: Sequence[str] | None = None,
                 max_output_chars: int = 8_000, max_calls: int = 8) -> None:
        from agentgym.parsing import DEFAULT_FORMATS, FORMATS

        parser = DEFAULT_FORMATS if parser is None else parser
        unknown = [f for f in parser if f not in FORMATS]
        if unknown:
            raise ConfigError(f"unknown tool-call formats {unknown}; choose from {FORMATS}")
        self.tools: dict[str, Tool] = {}
        for t in map(as_tool, tools):
            if t.name in self.tools:
                raise ConfigError(f"two tools are named {t.name!r}; tool names must be unique")
            self.tools[t.name] = t
        self.parser = tuple(parser)
        self.max_output_chars = max_output_chars
        self.max_calls = max_calls
        self._validators = {n: jsonschema.Draft202012Validator(_strict(t.spec.parameters))
                            for n, t in self.tools.items()}

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools' specs, in registration order."""
        return tuple(t.spec for t in self.tools.values())

    def wrap_validators(self, wrap: Callable[[Any, ToolSpec], Any]) -> None:
        """Replace each tool's argument validator with ``wrap(validator, spec)``.

        The replacement needs ``iter_errors(arguments)`` like a jsonschema validator (a
        faster check for simple schemas can fall back to the one it wraps).
        """
        self._validators = {name: wrap(v, self.tools[name].spec)
                            for name, v in self._validators.items()}

    def calls_of(self, action: Message) -> tuple[tuple[ToolCall, ...], tuple[str, ...]]:
        """The action's tool calls (structured, else parsed from text) and parse errors."""
        if action.tool_calls:
            return action.tool_calls, ()
        from agentgym.parsing import parse_tool_calls

        parsed = parse_tool_calls(action.content, formats=self.parser)
        return parsed.calls, parsed.errors

    async def run(self, action: Message, state: Any = None) -> ToolOutcome:
        """Run every tool call in ``action``; see the class docstring."""
        calls, errors = self.calls_of(action)
        if not calls:
            hint = errors[0] if errors else "no tool call found in the reply"
            return ToolOutcome(
                (Message("user", f"error: {hint}. Call one of the tools "
                                 f"{sorted(self.tools)} in the format described above."),),
                (), False)
        messages, results, valid, seen = [], [], not errors, []
        for i, call in enumerate(calls):
            if i >= self.max_calls:
                text, ok, value = (f"error: at most {self.max_calls} tool calls per turn; "
                                   "this one was not run"), False, None
            else:
                text, ok, value = await self._run_one(call, state)
            valid &= ok
            results.append(value)
            call = readable_call(call)  # a malformed call (a user's agent built it) as text
            seen.append(call)
            messages.append(Message("tool", text, tool_call_id=call.id, name=call.name))
        if errors:  # blocks that could not be read are agent mistakes too: say so
            messages.append(Message("user", "error: " + "; ".join(errors)))
        return ToolOutcome(tuple(messages), tuple(seen), valid, tuple(results))

    async def _run_one(self, call: ToolCall, state: Any) -> tuple[str, bool, Any]:
        if not isinstance(call.name, str):  # an answer, never a TypeError from the lookup
            return (f"error: {call.problem()}. Available tools: {sorted(self.tools)}", False,
                    None)
        t = self.tools.get(call.name)
        if t is None:
            return (f"error: unknown tool {call.name!r}{did_you_mean(call.name, self.tools) or '.'}"
                    f" Available tools: {sorted(self.tools)}", False, None)
        problem = call.problem()  # e.g. a backend passed the raw JSON text as the arguments
        if problem is not None:
            return f"error: {problem}", False, None
        problems = sorted(self._validators[call.name].iter_errors(dict(call.arguments)),
                          key=lambda e: list(e.path))
        if problems:
            detail = "; ".join(_describe(e) for e in problems[:3])
            return f"error: bad arguments for {call.name}: {detail}", False, None
        kwargs = dict(call.arguments)
        if "state" in inspect.signature(t.fn).parameters:
            kwargs["state"] = state
        try:
            # A fresh decimal context per call (this task's own): a tool that sets the
            # precision changes its own call only, never another episode's arithmetic.
            async with asyncio.timeout(t.timeout):
                with decimal.localcontext(decimal.Context()):
                    value = t.fn(**kwargs)
                    if inspect.isawaitable(value):
                        value = await typing.cast(Awaitable[Any], value)
        except TimeoutError:
            return f"error: {call.name} timed out after {t.timeout:g} s", False, None
        except Exception as exc:  # the tool's own failure is the agent's observation
            return f"error: {call.name} raised {type(exc).__name__}: {exc}", False, None
        return self._render(value), True, value

    def _render(self, value: Any) -> str:
        from agentgym.wrappers import clean_text

        if isinstance(value, str):
            text = value
        else:
            try:
                text = json.dumps(value, ensure_ascii=False, default=str)
            except Exception:  # circular, too deep, or a __str__ that raises
                try:
                    text = repr(value)
                except Exception:
                    text = f"<{type(value).__name__} object>"
        return clean_text(text, self.max_output_chars)


def readable_call(call: ToolCall) -> ToolCall:
    """``call`` with text in place of a malformed id or name and ``{}`` for malformed arguments.

    What :class:`ToolBox` reports in :attr:`ToolOutcome.calls` for a call it refused as
    malformed (:meth:`~agentgym.types.ToolCall.problem`), so code that reads the outcome's
    calls (names, arguments) needs no type checks of its own; such a call's result is always
    ``None``.
    """
    if call.problem() is None and isinstance(call.id, str):
        return call

    def text(value: Any) -> str:
        if isinstance(value, str):
            return value
        try:
            return repr(value)[:200]
        except Exception:  # a hostile __repr__
            return f"<{type(value).__name__}>"

    args = call.arguments
    well_formed = isinstance(args, Mapping) and all(isinstance(k, str) for k in args)
    return ToolCall(text(call.id), text(call.name), dict(args) if well_formed else {})


def _strict(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with unknown arguments rejected and ``nullable`` turned into a null type."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: fix(v) for k, v in node.items()}
            if node.get("nullable") is True:  # not a parameter named "nullable"
                del node["nullable"]
                node = {"anyOf": [node, {"type": "null"}]}
            return node
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    out = fix(dict(parameters))
    out.setdefault("additionalProperties", False)
    return out


def _describe(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else error.message
