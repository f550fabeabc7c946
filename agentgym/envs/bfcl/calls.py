"""Reading the model's reply: tool calls, and what is wrong with them.

Shared by the single- and multi-turn envs. Nothing here scores: a malformed call is an agent
mistake (``valid=False``), and BFCL's checkers decide the reward.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions

from agentgym.envs.bfcl.scoring import is_json_value
from agentgym.errors import did_you_mean
from agentgym.parsing import parse_tool_calls
from agentgym.types import Message, ToolCall, ToolSpec


def question_messages(turn: list[Mapping[str, Any]]) -> list[Message]:
    """BFCL's messages of one turn as agentgym messages."""
    return [Message(m["role"] if m["role"] in ("system", "user", "assistant") else "user",
                    str(m.get("content") or "")) for m in turn]


def read_calls(action: Message) -> tuple[tuple[ToolCall, ...], tuple[str, ...]]:
    """The reply's tool calls (structured, else parsed from its text) and parse errors.

    Names and ids that are not strings (a caller building ``ToolCall`` by hand) become strings,
    so a bad call is reported like any unknown function instead of breaking the step.
    """
    if action.tool_calls:
        return tuple(c if isinstance(c.name, str) and isinstance(c.id, str) else
                     ToolCall(str(c.id), str(c.name), c.arguments)
                     for c in action.tool_calls), ()
    parsed = parse_tool_calls(action.content)
    return parsed.calls, parsed.errors


def call_problems(call: ToolCall, tools: Mapping[str, ToolSpec]) -> str | None:
    """Why a call is malformed for its tool (unknown name, bad arguments), or None."""
    spec = tools.get(call.name)
    if spec is None:
        return (f"unknown function {call.name!r}{did_you_mean(str(call.name), tools) or ''}; "
                f"available: {sorted(tools)}")
    if not isinstance(call.arguments, Mapping):
        return f"the arguments of {call.name} must be a JSON object"
    if not is_json_value(call.arguments):
        return f"the arguments of {call.name} must be plain JSON values"
    known = set(spec.parameters.get("properties", {}))
    extra = sorted(set(call.arguments) - known)
    if extra:
        return f"{call.name} has no parameter {extra[0]!r}; its parameters: {sorted(known)}"
    try:
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(_types_only(spec.parameters)).iter_errors(
                dict(call.arguments)))
    except Exception as exc:  # a schema BFCL writes that jsonschema cannot read
        return f"could not check the arguments of {call.name}: {exc}"
    return None if error is None else f"bad arguments for {call.name}: {error.message}"


def _types_only(schema: Any) -> Any:
    """The schema without ``enum`` lists.

    BFCL's checker compares values with the ground truth, not with a doc's enum (which, in
    some entries, leaves out the accepted answer).
    """
    if isinstance(schema, Mapping):
        return {k: _types_only(v) for k, v in schema.items() if k != "enum"}
    if isinstance(schema, list):
        return [_types_only(v) for v in schema]
    return schema


def is_safe(arguments: Any) -> bool:
    """Whether BFCL's call string for these arguments is a plain literal call.

    BFCL's executor ``eval``s ``name(param=repr(value),...)``; with identifier parameter names
    and JSON values that string can do nothing but call the named method.
    """
    return (isinstance(arguments, Mapping) and is_json_value(arguments)
            and all(isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k)
                    for k in arguments))


PRECISION_LIMIT = 10_000
"""Most digits ``logarithm`` (mpmath) and ``square_root`` (Decimal) may be asked for: about
0.2 s of work on a loaded core; BFCL's data asks for at most 10."""
POWER_BITS_LIMIT = 1 << 20
"""Most bits of an exact integer ``power`` (about 315,000 digits; a few ms). Python prints no
integer over 4,300 digits, so BFCL answers an error for far smaller results anyway."""
ROUND_DIGITS_LIMIT = 10_000
"""Most negative ``decimal_places`` of ``round_number`` on an integer (which computes
``10**-decimal_places`` exactly)."""


def too_costly(name: str, arguments: Mapping[str, Any]) -> str | None:
    """Why running this call would hold a core for long, or None.

    These are the parameters of BFCL's API classes whose cost grows with a value the agent
    picks rather than with the length of its reply, all in ``MathAPI`` (the file system,
    messaging, posting, ticket, trading, travel and vehicle classes do work linear in their
    arguments' length): ``logarithm(precision=10**6)`` sets mpmath to a million digits,
    ``square_root(precision=10**7)`` asks Decimal for ten million, ``power(base=3,
    exponent=10**9)`` builds an exact integer of 1.6 billion bits and
    ``round_number(number=5, decimal_places=-10**8)`` one of 10**8 digits.
    """
    def number(key: str) -> int | float | None:
        value = arguments.get(key)
        return value if isinstance(value, int | float) else None

    if name in ("logarithm", "square_root"):
        precision = number("precision")
        if precision is not None and abs(precision) > PRECISION_LIMIT:
            return f"precision={precision!r} is too large (at most {PRECISION_LIMIT})"
    elif name == "power":
        base, exponent = arguments.get("base"), arguments.get("exponent")
        if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 \
                and abs(base) > 1:  # only int ** int is exact; floats overflow at once
            bits = exponent * abs(base).bit_length()
            if bits > POWER_BITS_LIMIT:
                return (f"base**exponent is too large: about {bits:,} bits (at most "
                        f"{POWER_BITS_LIMIT:,})")
    elif name == "round_number":
        places = number("decimal_places")
        if isinstance(arguments.get("number"), int) and places is not None \
                and places < -ROUND_DIGITS_LIMIT:
            return (f"decimal_places={places!r} is too large a shift for an integer (at "
                    f"least {-ROUND_DIGITS_LIMIT})")
    return None
