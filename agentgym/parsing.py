"""Parse tool calls out of model text, for the formats real models emit.

Formats, tried in the order given (the first that finds its marker wins):

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen,
  SmolLM2); several blocks allowed; a block cut off by ``max_tokens`` is still read when its
  JSON is complete.
- ``action``: ``<action>...</action>`` holding a JSON call, ``name(key=value, ...)`` with
  Python literals, or a bare ``name`` (a call with no arguments, e.g. ``<action>up</action>``).
- ``json``: a bare JSON object (or list of objects) with ``name`` and ``arguments``
  (or ``parameters``) anywhere in the text.

Nothing here raises on any input: what cannot be read is returned as an error string that
the env shows the model.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.types import ToolCall

FORMATS = ("hermes", "action", "json")
_HERMES_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_ACTION_RE = re.compile(r"<action>(.*?)(?:</action>|\Z)", re.DOTALL)
_NAME_RE = re.compile(r"^[A-Za-z_][\w.-]*$")
_JSON_START_RE = re.compile(r'\{\s*"|\[\s*\{')  # an object with a key, or a list of objects
_MAX_JSON_TRIES = 1_000  # bounds the work on degenerate text such as "{{{{..." or '{"a":{"a":...'
_MAX_TEXT = 200_000  # longer replies are cut before parsing; nothing sane is longer


@dataclass(frozen=True)
class ParsedCalls:
    """Result of :func:`parse_tool_calls`.

    Attributes:
        calls: Calls read successfully, with ids ``call_0``, ``call_1``, ...
        errors: One message per block that could not be read.
        format: The format whose marker was found, or None.
    """

    calls: tuple[ToolCall, ...]
    errors: tuple[str, ...]
    format: str | None


def parse_tool_calls(text: str, formats: Sequence[str] = FORMATS) -> ParsedCalls:
    """Read tool calls from ``text``; never raises on any text.

    Example:
        >>> parse_tool_calls('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>').calls
        (ToolCall(id='call_0', name='add', arguments={'a': 1}),)
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown tool-call formats {unknown}; choose from {FORMATS}")
    if not isinstance(text, str):
        return ParsedCalls((), (f"expected text, got {type(text).__name__}",), None)
    text = text[:_MAX_TEXT]
    for fmt in formats:
        found = _READERS[fmt](text)
        if found is None:
            continue
        calls, errors = [], []
        for item in found:
            if isinstance(item, str):
                errors.append(item)
            else:
                calls.append(ToolCall(f"call_{len(calls)}", item[0], item[1]))
        return ParsedCalls(tuple(calls), tuple(errors), fmt)
    return ParsedCalls((), (), None)


def marked_blocks(text: str) -> tuple[str, tuple[str, ...]] | None:
    """The marker format that wins under the default ``FORMATS`` and its raw blocks.

    ``parse_tool_calls(text)`` depends only on this pair when it is not None, so a caller
    that parses many texts sharing blocks (reasoning around the same call) can parse each
    distinct pair once. None when no ``hermes`` or ``action`` marker is present (the ``json``
    format then reads the whole text).

    Example:
        >>> marked_blocks('I go up. <tool_call>{"name": "up"}</tool_call>')
        ('hermes', ('{"name": "up"}',))
    """
    if not isinstance(text, str):
        return None
    text = text[:_MAX_TEXT]
    for fmt, pattern in (("hermes", _HERMES_RE), ("action", _ACTION_RE)):
        blocks = pattern.findall(text)
        if blocks:
            return fmt, tuple(blocks)
    return None


Item = tuple[str, dict[str, Any]] | str  # a (name, arguments) call or an error message


def _read_hermes(text: str) -> list[Item] | None:
    blocks = _HERMES_RE.findall(text)
    if not blocks:
        return None
    return [_call_from_json_text(b, "<tool_call>") for b in blocks]


def _read_action(text: str) -> list[Item] | None:
    blocks = _ACTION_RE.findall(text)
    if not blocks:
        return None
    return [_call_from_action(b) for b in blocks]


def _read_json(text: str) -> list[Item] | None:
    decoder = json.JSONDecoder()
    items: list[Item] = []
    pos = 0
    for _ in range(_MAX_JSON_TRIES):
        match = _JSON_START_RE.search(text, pos)
        if match is None:
            break
        start = match.start()
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # ValueError: also ints over the digit limit
            pos = start + 1
            continue
        pos = end
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, dict) and "name" in v:
                items.append(_call_from_obj(v, "JSON"))
    return items or None


def _call_from_json_text(raw: str, where: str) -> Item:
    raw = raw.strip()
    if not raw:
        return f"empty {where} block; put a JSON object with 'name' and 'arguments' inside"
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # ValueError: also ints over the digit limit
        snippet = raw if len(raw) <= 80 else raw[:77] + "..."
        reason = "too deeply nested" if isinstance(exc, RecursionError) else getattr(
            exc, "msg", "a number is too long")
        return f"malformed JSON in {where} ({reason}): {snippet}"
    return _call_from_obj(obj, where)


def _call_from_obj(obj: Any, where: str) -> Item:
    if not isinstance(obj, dict):
        return (f"the {where} call must be a JSON object with 'name' and 'arguments', got "
                f"{type(obj).__name__}")
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI-shaped
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return f"the {where} call has no tool name: expected a string field 'name'"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return f"the arguments of {name!r} are a string that is not valid JSON"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"the arguments of {name!r} must be a JSON object, got {type(args).__name__}"
    return name, args


def _call_from_action(raw: str) -> Item:
    raw = raw.strip()
    if not raw:
        return "empty <action> block; write an action inside, e.g. <action>up</action>"
    if raw.startswith("{"):
        return _call_from_json_text(raw, "<action>")
    if _NAME_RE.match(raw):
        return raw, {}
    match = re.match(r"^([A-Za-z_][\w.-]*)\s*\((.*)\)\s*$", raw, re.DOTALL)
    if match is None:
        snippet = raw if len(raw) <= 80 else raw[:77] + "..."
        return (f"cannot read the action {snippet!r}; write a tool name, name(key=value), "
                "or a JSON object")
    name, inner = match.groups()
    try:
        node = ast.parse(f"f({inner})", mode="eval").body
        if not isinstance(node, ast.Call):  # e.g. "a(x=1), b(y=2)" parses as a tuple
            return (f"cannot read the action {name}({inner[:60]}); write one call, "
                    "e.g. name(key=value)")
        if node.args:
            return f"{name}(...) must use keyword arguments, e.g. {name}(x=1)"
        args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        if len(args) != len(node.keywords):
            return f"{name}(...) cannot take **kwargs; write each argument as key=value"
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        return f"cannot read the arguments of {name}(...): {type(exc).__name__}"
    try:
        json.dumps(args)
    except (TypeError, ValueError):
        return f"the arguments of {name}(...) must be JSON values (numbers, strings, lists, ...)"
    return name, args


_READERS = {"hermes": _read_hermes, "action": _read_action, "json": _read_json}
