r"""Reading a request to :mod:`agentgym.serve`: every client mistake becomes a 4xx naming the field.

The body is parsed once and walked once (:func:`check_tree`): nesting deeper than
:attr:`~agentgym.serve.ServeLimits.max_depth` and strings holding a lone surrogate (valid JSON,
``"\ud800"``, but not text any tokenizer can encode) are refused there, whatever field holds
them. The readers below then check each field the server uses for its type and range
(OpenAI's schema, plus the vLLM extras the server answers with); unknown fields are ignored,
as vLLM does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError
from agentgym.parsing import parse_tool_calls
from agentgym.policies.base import SamplingParams
from agentgym.types import ROLES, Message, ToolCall, ToolSpec

MAX_STOP_STRINGS = 16
"""Most stop strings a request may give."""
MAX_STOP_CHARS = 256
"""Longest stop string: each decoded token is checked against a window this long."""
MAX_TOKENS = 2**24
"""Largest ``max_tokens`` accepted (the model's context limits it further)."""
SEED_RANGE = (-2**63, 2**64)
MAX_CHOICES = 64
"""Largest ``n`` (completions of one prompt) accepted."""
TOOL_CHOICES = ("none", "auto", "required")


class BadRequest(Exception):
    """A request the server cannot serve; answered with an OpenAI-style error body.

    Args:
        message: What was expected, what came and how to fix it.
        status: The HTTP status (4xx).
        kind: The OpenAI error ``type``.
        param: The field at fault (``messages[0].content``), or None.
    """

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param


def parse_json(raw: bytes, what: str = "the request body") -> Any:
    """``raw`` as JSON, or :class:`BadRequest` saying why it is not."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise BadRequest(f"{what} is nested too deeply to parse; send JSON nested at most "
                         "a few dozen levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None


def check_tree(value: Any, max_depth: int, root: str = "") -> None:
    """Refuse JSON nested deeper than ``max_depth`` or holding a string with a lone surrogate.

    Walks iteratively (no recursion), so any parsed value can be checked.

    Raises:
        BadRequest: Naming the path of the first offending value.
    """
    stack: list[tuple[Any, str, int]] = [(value, root, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > max_depth:
            raise BadRequest(f"{path or 'the request body'} is nested more than {max_depth} "
                             f"levels deep; at most {max_depth} are accepted",
                             param=path or None)
        if isinstance(item, dict):
            for key, child in item.items():
                sub = f"{path}.{key}" if path else str(key)
                _check_text(key, f"{sub} (a key)")
                stack.append((child, sub, depth + 1))
        else:
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))


def _check_text(text: str, path: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{path} holds a lone surrogate ({text[exc.start]!r} at character "
                         f"{exc.start}), which is not text; send valid UTF-8 (surrogates only "
                         "in pairs)", param=path) from None


def kind(value: object) -> str:
    """A value's JSON type name, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", float: "a number", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def optional(body: Mapping[str, Any], key: str, types: type | tuple[type, ...],
             expected: str) -> Any:
    """``body[key]`` when it is of ``types`` (never a bool for numbers), None when absent."""
    value = body.get(key)
    if value is None:
        return None
    numeric = types in (int, float, (int, float))
    if not isinstance(value, types) or (numeric and isinstance(value, bool)):
        raise BadRequest(f"'{key}' must be {expected}, got {kind(value)}", param=key)
    return value


def common(body: Any, model_name: str) -> dict[str, Any]:
    """Checks shared by both routes; returns the body as a dict."""
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {kind(body)}")
    model = body.get("model")
    if model is not None and model != model_name:
        raise BadRequest(f"the model {model!r} does not exist; this server serves "
                         f"{model_name!r}", status=404, param="model")
    n = optional(body, "n", int, "an integer")
    if n is not None and not 1 <= n <= MAX_CHOICES:
        raise BadRequest(f"'n' must be in [1, {MAX_CHOICES}], got {n}", param="n")
    if optional(body, "best_of", int, "an integer") not in (None, 1):
        raise BadRequest("best_of is not supported; send several requests instead",
                         param="best_of")
    optional(body, "stream", bool, "a boolean")
    options = optional(body, "stream_options", dict, "an object")
    if options is not None:
        if not body.get("stream"):
            raise BadRequest("'stream_options' is only allowed with 'stream': true",
                             param="stream_options")
        usage = options.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise BadRequest(f"'stream_options.include_usage' must be a boolean, got "
                             f"{kind(usage)}", param="stream_options.include_usage")
    top = optional(body, "top_logprobs", int, "an integer")
    if top is not None and not 0 <= top <= 20:
        raise BadRequest(f"'top_logprobs' must be in [0, 20], got {top}", param="top_logprobs")
    return body


@dataclass(frozen=True)
class Choices:
    """How many completions a request asks for, and how they are sent.

    Attributes:
        n: Completions of the one prompt (seeded ``seed``, ``seed + 1``, ... when seeded).
        top_logprobs: Likeliest alternatives reported per token (0 = none).
        stream: Send server-sent events as tokens are sampled.
        include_usage: With ``stream``, end with a chunk holding the token counts.
    """

    n: int = 1
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False


def choices(body: Mapping[str, Any], *, chat: bool) -> Choices:
    """The :class:`Choices` of a request :func:`common` accepted.

    Chat asks for alternatives with ``logprobs: true, top_logprobs: k``; completions with
    ``logprobs: k``.
    """
    if chat:
        top = body.get("top_logprobs") or 0
        if top and not body.get("logprobs"):
            raise BadRequest("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    else:  # an integer; true asks for the sampled tokens' log-probs only
        top = 0 if isinstance(body.get("logprobs"), bool) else body.get("logprobs") or 0
    options = body.get("stream_options") or {}
    return Choices(body.get("n") or 1, int(top), bool(body.get("stream")),
                   bool(options.get("include_usage")))


def sampling(body: Mapping[str, Any]) -> SamplingParams:
    """SamplingParams from the request; defaults are SamplingParams' own."""
    kwargs: dict[str, Any] = {}
    for key in ("temperature", "top_p"):
        value = optional(body, key, (int, float), "a number")
        if value is not None:
            kwargs[key] = float(value)
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    max_tokens = optional(body, key, int, "an integer")
    if max_tokens is not None:
        if not 1 <= max_tokens <= MAX_TOKENS:
            raise BadRequest(f"'{key}' must be in [1, {MAX_TOKENS}], got {max_tokens}",
                             param=key)
        kwargs["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise BadRequest("'stop' must be a string or a list of strings", param="stop")
        if len(stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stop):
            raise BadRequest(f"'stop' takes at most {MAX_STOP_STRINGS} strings of at most "
                             f"{MAX_STOP_CHARS} characters", param="stop")
        kwargs["stop"] = tuple(stop)
    seed = optional(body, "seed", int, "an integer")
    if seed is not None:
        if not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
            raise BadRequest(f"'seed' must fit in 64 bits ([-2**63, 2**64)), got {seed}",
                             param="seed")
        kwargs["seed"] = seed
    try:
        return SamplingParams(**kwargs)
    except ConfigError as exc:
        raise BadRequest(str(exc), param=str(exc).split(" ", 1)[0]) from None


def tool_choice(body: Mapping[str, Any]) -> str | None:
    """``"none"``, ``"auto"``, ``"required"`` or a function's name (None = absent)."""
    raw = body.get("tool_choice")
    if raw is None or raw in TOOL_CHOICES:
        return raw
    fn = raw.get("function") if isinstance(raw, Mapping) else None
    if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
        return fn["name"]
    raise BadRequest(f"'tool_choice' must be one of {TOOL_CHOICES} or "
                     "{'type': 'function', 'function': {'name': ...}}, got "
                     f"{kind(raw)}", param="tool_choice")


def tools(raw: object) -> tuple[ToolSpec, ...]:
    """The offered tools (OpenAI's ``{"type": "function", "function": {...}}`` form)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest(f"'tools' must be a list, got {kind(raw)}", param="tools")
    out = []
    for i, item in enumerate(raw):
        where = f"tools[{i}]"
        fn = item.get("function", item) if isinstance(item, Mapping) else None
        if not isinstance(fn, Mapping):
            raise BadRequest(f"{where} must be an object with a 'function' object, got "
                             f"{kind(item)}; 'tools' holds a malformed tool", param=where)
        where = f"{where}.function" if "function" in item else where
        name, description = fn.get("name"), fn.get("description")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"{where}.name must be a non-empty string, got {kind(name)}; "
                             "'tools' holds a malformed tool", param=f"{where}.name")
        if description is not None and not isinstance(description, str):
            raise BadRequest(f"{where}.description must be a string, got {kind(description)}",
                             param=f"{where}.description")
        parameters = fn.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise BadRequest(f"{where}.parameters must be a JSON Schema object, got "
                             f"{kind(parameters)}", param=f"{where}.parameters")
        out.append(ToolSpec.from_dict({"name": name, "description": description or "",
                                       "parameters": parameters}))
    return tuple(out)


def message(item: object, i: int, max_depth: int) -> Message:
    """One chat message; an echoed tool call is dropped (see :mod:`agentgym.serve`)."""
    where = f"messages[{i}]"
    if not isinstance(item, Mapping):
        raise BadRequest(f"{where} must be an object, got {kind(item)}", param=where)
    role = "system" if item.get("role") == "developer" else item.get("role")
    if role not in ROLES:
        raise BadRequest(f"{where}.role must be one of {ROLES}, got {role!r}",
                         param=f"{where}.role")
    content = item.get("content")
    if isinstance(content, list):  # content parts: only text ones are understood
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise BadRequest(f"{where}.content holds non-text parts; send text only",
                                 param=f"{where}.content[{j}]")
            if not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}.content[{j}].text must be a string, got "
                                 f"{kind(part.get('text'))}", param=f"{where}.content[{j}].text")
        content = "".join(p["text"] for p in content)
    if content is not None and not isinstance(content, str):
        raise BadRequest(f"{where}.content must be a string, got {kind(content)}",
                         param=f"{where}.content")
    for key in ("tool_call_id", "name"):
        if item.get(key) is not None and not isinstance(item.get(key), str):
            raise BadRequest(f"{where}.{key} must be a string, got {kind(item.get(key))}",
                             param=f"{where}.{key}")
    raw_calls = item.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise BadRequest(f"{where}.tool_calls must be a list, got {kind(raw_calls)}",
                         param=f"{where}.tool_calls")
    calls = tuple(tool_call(c, f"{where}.tool_calls[{j}]", max_depth)
                  for j, c in enumerate(raw_calls))
    text = content or ""
    if calls and text:
        echoed = parse_tool_calls(text).calls
        if [(c.name, dict(c.arguments)) for c in echoed] == [
                (c.name, dict(c.arguments)) for c in calls]:
            calls = ()  # the content already holds these calls; see agentgym.serve
    return Message(role, text, calls, item.get("tool_call_id"), item.get("name"))


def tool_call(raw: object, where: str, max_depth: int) -> ToolCall:
    """One call of an assistant message; ``arguments`` may be a JSON string or an object."""
    fn = raw.get("function") if isinstance(raw, Mapping) else None
    if not isinstance(raw, Mapping) or not isinstance(fn, Mapping) \
            or not isinstance(fn.get("name"), str):
        raise BadRequest(f"{where} needs function.name (a string)", param=where)
    call_id = raw.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise BadRequest(f"{where}.id must be a string, got {kind(call_id)}",
                         param=f"{where}.id")
    args = fn.get("arguments") or {}
    field = f"{where}.function.arguments"
    if isinstance(args, str):
        args = parse_json(args.encode("utf-8"), field)
        check_tree(args, max_depth, field)
    if not isinstance(args, Mapping):
        raise BadRequest(f"{field} must be a JSON object, got {kind(args)}", param=field)
    return ToolCall(call_id or "call_0", fn["name"], dict(args))


def prompt(body: Mapping[str, Any]) -> str | tuple[int, ...]:
    """The completion prompt: text, or token ids (a batch of one is unwrapped)."""
    raw = body.get("prompt")
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str | list):
        raw = raw[0]  # a batch of one, as OpenAI clients often send it
    if isinstance(raw, str):
        if not raw:
            raise BadRequest("'prompt' is empty", param="prompt")
        return raw
    if isinstance(raw, list) and all(
            type(t) is int and t >= 0 for t in raw):  # noqa: E721 (bools are not ids)
        if not raw:
            raise BadRequest("'prompt' is empty", param="prompt")
        return tuple(raw)
    raise BadRequest("'prompt' must be a string or a list of token ids (one prompt; batches "
                     f"are not supported), got {kind(raw)}", param="prompt")
