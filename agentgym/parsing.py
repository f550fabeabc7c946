"""Parse tool calls out of model text, for the formats real models emit.

Formats, tried in the order given (the first that finds its marker wins); the default
order reads every family below, so an env understands any of these models unconfigured:

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen2.5,
  Qwen3, SmolLM2); several blocks allowed; a block cut off by ``max_tokens`` is still read
  when its JSON is complete. A block holding Qwen3-Coder XML is read as ``qwen3_coder``.
- ``action``: ``<action>...</action>`` holding a JSON call, ``name(key=value, ...)`` with
  Python literals, or a bare ``name`` (a call with no arguments, e.g. ``<action>up</action>``).
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (Mistral v3 tokenizers) or
  ``[TOOL_CALLS]name[ARGS]{...}`` (v11+, Mistral Small 3.2, Devstral, Magistral).
- ``deepseek``: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` + a fenced JSON block
  (V3, R1) or ``<｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}`` (V3.1), ended by
  ``<｜tool▁call▁end｜>``.
- ``harmony``: GPT-OSS's ``to=functions.name ... <|message|>{...}<|call|>``.
- ``qwen3_coder``: ``<function=name><parameter=key>value</parameter></function>`` (Qwen3-Coder);
  a value that is JSON (a number, true, a list, ...) is read as JSON, anything else as text.
- ``json`` (alias ``llama3_json``): a bare JSON object (or list of objects) with ``name`` and
  ``arguments`` (or ``parameters``, as Llama 3.1–3.3 write after ``<|python_tag|>``) anywhere.
- ``pythonic``: a reply that is a Python list of calls, ``[name(key=value), ...]`` (Llama 3.2
  and 4, optionally between ``<|python_start|>`` and ``<|python_end|>``).

:func:`detect_tool_format` names the family a chat template speaks.

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

FORMATS = ("hermes", "action", "mistral", "deepseek", "harmony", "qwen3_coder", "json",
           "llama3_json", "pythonic")
"""Every format name :func:`parse_tool_calls` accepts."""
DEFAULT_FORMATS = ("hermes", "action", "mistral", "deepseek", "harmony", "qwen3_coder", "json",
                   "pythonic")
"""The order tried when none is given: every family, each recognised by its own marker."""
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


def parse_tool_calls(text: str, formats: Sequence[str] = DEFAULT_FORMATS) -> ParsedCalls:
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
    """The marker format that wins under ``DEFAULT_FORMATS`` and its raw blocks.

    ``parse_tool_calls(text)`` depends only on this pair when it is not None, so a caller
    that parses many texts sharing blocks (reasoning around the same call) can parse each
    distinct pair once. None when no ``hermes`` or ``action`` marker is present (the later
    formats then read the whole text).

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
    return [_qwen3_coder_block(b) if b.lstrip().startswith("<function=") else
            _call_from_json_text(b, "<tool_call>") for b in blocks]


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


_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_NAME_RE = re.compile(r"\s*([A-Za-z_][\w.-]*)\s*(?:\[CALL_ID\]\s*\w*\s*)?\[ARGS\]")
_DS_CALL_RE = re.compile(r"<｜tool▁call▁begin｜>(.*?)(?:<｜tool▁call▁end｜>|\Z)", re.DOTALL)
_DS_SEP = "<｜tool▁sep｜>"
_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*(?:```\s*)?$", re.DOTALL)
_HARMONY_RE = re.compile(r"to=functions\.([^\s<]{0,200})(.{0,200}?)<\|message\|>(.*?)"
                         r"(?:<\|call\|>|<\|end\|>|<\|return\|>|\Z)", re.DOTALL)
_FUNCTION_RE = re.compile(r"<function=([^>\n]{0,200})>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER_RE = re.compile(r"<parameter=([^>\n]{0,200})>(.*?)(?:</parameter>|(?=<parameter=)|\Z)",
                           re.DOTALL)
# Matched against the stripped reply with its markers cut off: a leading or trailing ``\s*`` in
# the pattern itself backtracks quadratically on a reply that is a long run of whitespace.
_PYTHONIC_RE = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(.*\]", re.DOTALL)
_PYTHONIC_STARTS = ("<|python_start|>", "<|python_tag|>")
_PYTHONIC_END = "<|python_end|>"


def _read_mistral(text: str) -> list[Item] | None:
    if _MISTRAL not in text:
        return None
    items: list[Item] = []
    decoder = json.JSONDecoder()
    for chunk in text.split(_MISTRAL)[1:]:
        body = chunk.lstrip()
        if body[:1] in ("[", "{"):  # v3: a JSON list (or object) of calls
            try:
                value, _ = decoder.raw_decode(body)
            except (ValueError, RecursionError):
                items.append(f"malformed JSON after [TOOL_CALLS]: {_snippet(body)}")
                continue
            values = value if isinstance(value, list) else [value]
            items += [_call_from_obj(v, "[TOOL_CALLS]") for v in values] or [
                "empty call list after [TOOL_CALLS]"]
            continue
        match = _MISTRAL_NAME_RE.match(body)
        if match is None:  # v11: name[ARGS]{...}
            items.append(f"cannot read the call after [TOOL_CALLS]: {_snippet(body)}; write "
                         'name[ARGS]{"key": value}')
            continue
        items.append(_name_and_json(match.group(1), body[match.end():], "[TOOL_CALLS]"))
    return items


def _read_deepseek(text: str) -> list[Item] | None:
    blocks = _DS_CALL_RE.findall(text)
    if not blocks:
        return None
    items: list[Item] = []
    for block in blocks:
        head, sep, rest = block.partition(_DS_SEP)
        if not sep:
            items.append(f"a DeepSeek tool call without {_DS_SEP}: {_snippet(block)}")
        elif head.strip() == "function":  # V3 / R1: type, then name and fenced JSON
            name, _, args = rest.partition("\n")
            fenced = _FENCE_RE.match(args)
            items.append(_name_and_json(name.strip(), fenced.group(1) if fenced else args,
                                        "DeepSeek tool call"))
        else:  # V3.1: name<sep>{json}
            items.append(_name_and_json(head.strip(), rest, "DeepSeek tool call"))
    return items


def _read_harmony(text: str) -> list[Item] | None:
    found = _HARMONY_RE.findall(text)
    if not found:
        return None
    return [_name_and_json(name, body, "harmony message", strip_end=True)
            for name, _header, body in found]


def _read_qwen3_coder(text: str) -> list[Item] | None:
    if "<function=" not in text:
        return None
    return [_qwen3_coder_block(m.group(0)) for m in _FUNCTION_RE.finditer(text)]


def _qwen3_coder_block(raw: str) -> Item:
    match = _FUNCTION_RE.search(raw)
    if match is None:
        return f"cannot read the <function=...> block: {_snippet(raw.strip())}"
    name = match.group(1).strip()
    if not _NAME_RE.match(name):
        return f"<function={_snippet(name)}> does not name a tool"
    args: dict[str, Any] = {}
    for key, value in _PARAMETER_RE.findall(match.group(2)):
        key = key.strip()
        if not key:
            return f"a <parameter=...> of {name!r} has no name"
        value = value.strip("\n")
        try:  # numbers, booleans, lists and objects are JSON; anything else is text
            parsed = json.loads(value)
            args[key] = value if isinstance(parsed, str) else parsed
        except (ValueError, RecursionError):
            args[key] = value
    return name, args


def _read_pythonic(text: str) -> list[Item] | None:
    body = text.strip()
    for start in _PYTHONIC_STARTS:
        if body.startswith(start):
            body = body[len(start):].lstrip()
            break
    if body.endswith(_PYTHONIC_END):
        body = body[:-len(_PYTHONIC_END)].rstrip()
    if _PYTHONIC_RE.fullmatch(body) is None:
        return None
    try:
        node = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return [f"cannot read the list of calls ({type(exc).__name__}): {_snippet(body)}"]
    if not isinstance(node, ast.List):
        return None
    return [_call_from_action(ast.unparse(el)) if isinstance(el, ast.Call) else
            f"expected calls like name(key=value) in the list, got {_snippet(ast.unparse(el))}"
            for el in node.elts]


def _name_and_json(name: str, raw: str, where: str, strip_end: bool = False) -> Item:
    """A call from a tool name and the JSON text of its arguments."""
    if not _NAME_RE.match(name):
        return f"the {where} does not name a tool: {_snippet(name)}"
    raw = raw.strip()
    if not raw:
        return name, {}
    try:
        args, end = json.JSONDecoder().raw_decode(raw)
    except (ValueError, RecursionError):
        return f"malformed JSON arguments of {name!r} in the {where}: {_snippet(raw)}"
    if strip_end and raw[end:].strip():
        return f"text after the JSON arguments of {name!r} in the {where}: {_snippet(raw[end:])}"
    if not isinstance(args, dict):
        return f"the arguments of {name!r} must be a JSON object, got {type(args).__name__}"
    return name, args


def _snippet(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


TEMPLATE_MARKERS = (
    ("qwen3_coder", ("<parameter=",)),
    ("hermes", ("<tool_call>",)),
    ("mistral", ("[TOOL_CALLS]",)),
    ("deepseek", ("tool▁call▁begin", "tool▁calls▁begin")),
    ("harmony", ("<|channel|>", "<|call|>")),
    ("pythonic", ("<|python_start|>",)),
    ("llama3_json", ("<|python_tag|>", "ipython")),
)
"""Markers in a chat template that name the tool-call family its model was trained on."""


def detect_tool_format(template: Any) -> str | None:
    """The tool-call format a chat template (or a tokenizer's) speaks, or None if unknown.

    Example:
        >>> detect_tool_format("{% for m in messages %}...[TOOL_CALLS]...{% endfor %}")
        'mistral'
    """
    template = getattr(template, "chat_template", template)
    if isinstance(template, dict):  # named templates: "default" and "tool_use"
        template = "\n".join(str(t) for t in template.values())
    if not isinstance(template, str):
        return None
    for fmt, markers in TEMPLATE_MARKERS:
        if any(m in template for m in markers):
            return fmt
    return None


def formats_for(tool_format: str | None) -> tuple[str, ...]:
    """The parse order for a model's format: it first, then every other family.

    Raises:
        ValueError: An unknown format name.
    """
    if tool_format is None or tool_format == "auto":
        return DEFAULT_FORMATS
    if tool_format not in FORMATS:
        raise ValueError(f"unknown tool-call format {tool_format!r}; choose from "
                         f"{('auto', *FORMATS)}")
    return (tool_format, *(f for f in DEFAULT_FORMATS if f != tool_format))


_READERS = {"hermes": _read_hermes, "action": _read_action, "mistral": _read_mistral,
            "deepseek": _read_deepseek, "harmony": _read_harmony,
            "qwen3_coder": _read_qwen3_coder, "json": _read_json, "llama3_json": _read_json,
            "pythonic": _read_pythonic}
