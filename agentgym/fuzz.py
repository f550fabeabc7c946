"""Hostile replies for an env's ``step``: what a broken or adversarial model could write.

An env must answer every one of them with an observation (an agent mistake, usually
``valid=False``, and always so for calls only to tools the env does not have, even where
prose is an action), never an exception. :func:`hostile_replies` generates them deterministically
from a seed, shaped by the env's tools (their names and parameter types), and
:func:`fuzz_env` feeds them through ``step`` and reports every exception or malformed result.

What is generated, each kind mixed at random:

- text: empty, whitespace, control characters, NUL bytes, lone surrogates, ANSI escapes,
  right-to-left and zero-width characters, 100,000-character walls;
- numbers no parser expects: 5,000-digit integers, ``1e309``, ``NaN``, ``-0``;
- tool-call markup that breaks: unclosed ``<tool_call>``, JSON nested 100,000 deep, 5,000-digit
  arguments, arguments that are lists or strings, names that are numbers, 500 calls at once;
- structured calls (``Message.tool_calls``) to real tools with wrong, missing, extra, huge or
  path-traversing arguments, and to tools that do not exist;
- the env's own tool names and action words with garbage around them.

Example:
    >>> import asyncio, agentgym
    >>> report = asyncio.run(fuzz_env(agentgym.make("agentgym/MentalMath-v0"), replies=50))
    >>> report.steps, report.failures
    (50, ())
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.env import Env
from agentgym.types import Message, StepResult, ToolCall, ToolSpec

DEEP = 100_000
"""Nesting depth of the deepest JSON sent (far past the parser's recursion limit)."""

_TEXTS = (
    "", " ", "\n\n\t", "\x00", "\x00" * 64, "\ud800", "a\udfffb", "\u202eevil\u202c",
    "\u200b\u200c\u200d\ufeff", "\x1b[2J\x1b[31mred\x1b[0m", "\r\n" * 100, "🧨" * 500,
    "é" * 1000, "null", "None", "undefined", "true", "[]", "{}", "\\", "'\"`", "%s%n%x",
    "${HOME}$(id)`id`", "; rm -rf / #", "../../../../etc/passwd", "<script>alert(1)</script>",
    "</tool_call>", "<tool_call>", "<action>", "</action>", "<answer></answer>",
)
_NUMBERS = ("9" * 5000, "-" + "7" * 5000, "1e309", "-1e309", "NaN", "Infinity", "-0",
            "0x" + "f" * 1000, "1" + "0" * 400 + ".5", "4294967296", "-9223372036854775809")


def _deep_json(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def _bad_values(rng: random.Random) -> list[Any]:
    return [None, True, -1, 0, 2**70, 10**400, 1e308, -0.0, "", "x" * 100_000,
            rng.choice(_TEXTS), rng.choice(_NUMBERS), [], [[[[]]]], {}, {"a": {"b": {}}},
            [1] * 10_000, "\x00\ud800", "../" * 50 + "etc/passwd"]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"x": value}
    return value


def _markup(rng: random.Random, names: Sequence[str]) -> str:
    name = rng.choice([*names, "no_such_tool", "", "0", "\x00", "x" * 5000]) if names else "x"
    args = rng.choice([
        "{", "}", "[]", '"text"', "null", "1", _deep_json(), '{"a": ' + "9" * 5000 + "}",
        '{"a": NaN}', '{"a": Infinity}', '{"a": 1, "a": 2}', '{"' + "k" * 10_000 + '": 1}',
        '{"path": "../../../etc/passwd"}', '{"a": "\\ud800"}', "{" + '"a":' * 1000,
    ])
    return rng.choice([
        f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>',
        f'<tool_call>{{"name": "{name}", "arguments": {args}',  # never closed
        f"<tool_call>{args}</tool_call>",
        f'<tool_call>{{"name": {rng.choice(["1", "null", "[]", _deep_json(2000)])}, '
        f'"arguments": {{}}}}</tool_call>',
        f"<action>{name}({args})</action>",
        f"<action>{name}(" + "(" * 5000 + "</action>",
        f'{{"name": "{name}", "arguments": {args}}}',
        f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>' * 500,
        _deep_json(),
        "<tool_call>" + _deep_json() + "</tool_call>",
    ])


def _call(rng: random.Random, tools: Sequence[ToolSpec], index: int) -> ToolCall:
    if not tools or rng.random() < 0.15:
        return ToolCall(f"fz{index}", rng.choice(["no_such_tool", "", "x" * 1000, "__init__",
                                                  "../bash"]), {})
    tool = rng.choice(list(tools))
    props: Mapping[str, Any] = tool.parameters.get("properties", {}) or {}
    args: dict[str, Any] = {}
    mode = rng.choice(["wrong", "missing", "extra", "deep", "mixed"])
    for key in props:
        if mode == "missing" and rng.random() < 0.7:
            continue
        args[key] = rng.choice(_bad_values(rng))
    if mode == "extra":
        args[rng.choice(["__class__", "self", "kwargs", "x" * 300])] = 1
    if mode == "deep":
        # Deep, but still encodable as JSON: a server's parser would have refused deeper.
        args[rng.choice(list(props) or ["x"])] = _nested(rng.choice([50, 500]))
    return ToolCall(f"fz{index}", tool.name, args)


def _words(rng: random.Random, env: Env) -> list[str]:
    words = [t.name for t in env.tools]
    for name in ("actions", "valid_actions", "action_words", "commands"):
        value = getattr(env, name, None)
        if isinstance(value, Sequence) and not isinstance(value, str):
            words += [str(v) for v in list(value)[:50]]
    return words or ["go", "look", "north", "submit", "answer", "1"]


def hostile_replies(env: Env, seed: int = 0) -> Iterator[tuple[str, Message]]:
    """An endless, seeded stream of ``(kind, assistant message)`` for ``env``.

    Args:
        env: The env (its tools and action words shape the replies).
        seed: Same seed, same stream.
    """
    rng = random.Random(seed)
    names = [t.name for t in env.tools]
    index = 0
    while True:
        index += 1
        kind = rng.choice(["text", "number", "markup", "calls", "words", "mixed"])
        if kind == "text":
            content = rng.choice(_TEXTS) * rng.choice([1, 1, 3, 2000])
            yield kind, Message("assistant", content[:200_000])
        elif kind == "number":
            yield kind, Message("assistant", f"The answer is {rng.choice(_NUMBERS)}")
        elif kind == "markup":
            yield kind, Message("assistant", _markup(rng, names))
        elif kind == "calls":
            calls = tuple(_call(rng, env.tools, index * 10 + i)
                          for i in range(rng.choice([1, 1, 2, 50])))
            yield kind, Message("assistant", rng.choice(["", "calling", "\x00"]),
                                tool_calls=calls)
        elif kind == "words":
            word = rng.choice(_words(rng, env))
            content = rng.choice([word, word * 1000, f"{word} {rng.choice(_NUMBERS)}",
                                  f"{word} {rng.choice(_TEXTS)}", f"  {word.upper()}\n\n"])
            yield kind, Message("assistant", content)
        else:
            parts = [rng.choice(_TEXTS), _markup(rng, names), rng.choice(_NUMBERS)]
            rng.shuffle(parts)
            yield kind, Message("assistant", "\n".join(parts))


@dataclass(frozen=True)
class FuzzFailure:
    """One reply that made ``step`` (or the ``reset`` after it) misbehave."""

    kind: str
    """The kind of reply (``text``, ``number``, ``markup``, ``calls``, ``words``, ``mixed``)."""
    reply: str
    """The reply's start, for the report."""
    error: str
    """The exception (type and message) or what was wrong with the result."""


@dataclass(frozen=True)
class FuzzReport:
    """What :func:`fuzz_env` saw."""

    steps: int
    """Replies fed through ``step``."""
    episodes: int
    """Resets done."""
    failures: tuple[FuzzFailure, ...]
    """Every reply that raised or gave a malformed result (empty when the env held)."""
    seconds: float
    """Wall time."""


def _malformed(result: Any) -> str | None:
    if not isinstance(result, StepResult):
        return f"step returned {type(result).__name__}, expected StepResult"
    if not all(isinstance(m, Message) and isinstance(m.content, str)
               for m in result.observation):
        return "an observation that is not a tuple of Messages with str content"
    if result.reward is not None and not math.isfinite(result.reward):
        return f"a non-finite reward {result.reward!r}"
    return None


def _unknown_only(message: Message, known: set[str]) -> bool:
    """Whether every call of the reply names a tool the env does not have."""
    return bool(known and message.tool_calls) and all(
        c.name not in known for c in message.tool_calls)


def _accepted_unknown(result: StepResult) -> str | None:
    # An unknown tool is a mistake in every tool env, including those where prose is an
    # action (prose_is_action): declaring prose legitimate never makes a made-up call so.
    return "calls to tools that do not exist came back valid" if result.valid else None


def _describe(message: Message) -> str:
    text = message.content[:80] + ("…" if len(message.content) > 80 else "")
    if message.tool_calls:
        text += f" +{len(message.tool_calls)} call(s) to {message.tool_calls[0].name[:30]!r}"
    return text


async def fuzz_env(env: Env, *, replies: int, seed: int = 0, max_failures: int = 20
                   ) -> FuzzReport:
    """Feed ``replies`` hostile replies through ``env.step`` (reset whenever an episode ends).

    Args:
        env: The env; reset here, closed at the end.
        replies: How many replies to send.
        seed: Seeds both the replies and the episodes.
        max_failures: Stop early after this many failures (the report is already clear).

    Returns:
        A :class:`FuzzReport`; ``failures`` is empty when every reply became an observation.
    """
    start, failures, episodes, sent = time.perf_counter(), list[FuzzFailure](), 0, 0
    stream = hostile_replies(env, seed)
    try:
        await env.reset(seed=seed)
        episodes = 1
        while sent < replies and len(failures) < max_failures:
            kind, message = next(stream)
            known = {t.name for t in env.tools}  # tools may change with the step
            sent += 1
            try:
                result = await env.step(message)
            except Exception as exc:  # the defect this hunts for
                failures.append(FuzzFailure(kind, _describe(message),
                                            f"{type(exc).__name__}: {str(exc)[:300]}"))
                result = None
            problem = _malformed(result) if result is not None else None
            if problem is None and result is not None and _unknown_only(message, known):
                problem = _accepted_unknown(result)
            if problem:
                failures.append(FuzzFailure(kind, _describe(message), problem))
            if result is None or problem or result.done:
                await env.reset(seed=seed + episodes)
                episodes += 1
    finally:
        await env.aclose()
    return FuzzReport(sent, episodes, tuple(failures), time.perf_counter() - start)
