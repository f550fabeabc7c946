"""Verifiers: score a submitted answer against a task.

A verifier is any callable ``(answer: str, task: Task) -> float | bool`` (``Task`` from
:mod:`agentgym.tool_env`), or an async one (awaited by :func:`ascore`). ``True``/``False``
mean 1.0/0.0; a number is the reward as is.
A verifier that raises is a bug in the task, not a wrong answer: :class:`~agentgym.ToolEnv`
lets the exception end the episode as an ``error`` trajectory instead of scoring it 0.

Built-ins, by name (``ToolEnv(..., verifier="numeric")``) or as factories:

- ``exact``: the answer equals ``task.answer`` after normalisation (case, surrounding
  whitespace and punctuation, inner runs of spaces, a leading "the"/"a"/"an").
- ``numeric``: the last number in the answer is within ``abs_tol`` or ``rel_tol`` of
  ``task.answer`` (``1,234`` and ``1234.0`` both read as 1234; in ``93.2 - 32 = 61.2`` the
  answer is 61.2, the convention of GSM8K-style graders).
- ``contains``: the normalised expected answer appears in the normalised answer.
- ``judge``: a model judges the answer against a rubric (:mod:`agentgym.judge`); async, and
  a judge fault ends the episode as an ``error`` trajectory, never a zero.
"""

from __future__ import annotations

import inspect
import math
import os
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from agentgym.tool_env import Task

Verifier = Callable[[str, "Task"], "float | bool | Awaitable[float | bool]"]
_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_ARTICLE_RE = re.compile(r"^(?:the|a|an)\s+")
_EDGE_RE = re.compile(r"^[\s\"'`.,;:!?()\[\]{}]+|[\s\"'`.,;:!?()\[\]{}]+$")


def normalize(text: str) -> str:
    """Lower-case, trim punctuation and whitespace at the ends, squeeze spaces, drop an article."""
    text = _EDGE_RE.sub("", str(text).strip().lower())
    return _ARTICLE_RE.sub("", " ".join(text.split()))


def parse_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands separators allowed), or None."""
    found = _NUMBER_RE.findall(str(text)[-10_000:])  # the tail is where the answer is
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except (ValueError, OverflowError):
        return None


def _expected(task: Task) -> Any:
    if task.answer is None:
        raise ConfigError(
            f"task {task.id!r} has no answer, so the built-in verifiers cannot score it; give "
            "the task an 'answer' or pass your own verifier=fn(answer, task)"
        )
    return task.answer


def exact(*, normalized: bool = True) -> Verifier:
    """Exact match with ``task.answer`` (also any of a list/tuple of accepted answers).

    Example:
        >>> from agentgym.tool_env import Task
        >>> exact()("  The Eiffel Tower.", Task("t", "?", answer="eiffel tower"))
        True
    """
    fix = normalize if normalized else (lambda s: str(s).strip())

    def verify(answer: str, task: Task) -> bool:
        expected = _expected(task)
        options = expected if isinstance(expected, list | tuple) else [expected]
        return fix(answer) in {fix(str(o)) for o in options}

    return verify


def numeric(*, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> Verifier:
    """The last number in the answer is close to ``task.answer``.

    Example:
        >>> from agentgym.tool_env import Task
        >>> numeric(abs_tol=0.01)("about 3.141", Task("t", "pi?", answer=3.14159))
        True
    """
    if rel_tol < 0 or abs_tol < 0:
        raise ConfigError(f"tolerances must be >= 0, got rel_tol={rel_tol}, abs_tol={abs_tol}")

    def verify(answer: str, task: Task) -> bool:
        expected = float(_expected(task))
        got = parse_number(answer)
        return got is not None and math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol)

    return verify


def contains() -> Verifier:
    """The normalised expected answer appears in the normalised answer."""

    def verify(answer: str, task: Task) -> bool:
        return normalize(str(_expected(task))) in normalize(answer)

    return verify


def judge_from_env() -> Verifier:
    """``judge``: an LLM judge (:mod:`agentgym.judge`) configured by environment variables.

    It asks ``$AGENTGYM_JUDGE_MODEL`` at ``$AGENTGYM_JUDGE_URL`` with the rubric
    ``$AGENTGYM_JUDGE_RUBRIC`` (optional); in Python, ``agentgym.judge.judge(url, model)``.
    """
    from agentgym.judge import judge

    url, model = os.environ.get("AGENTGYM_JUDGE_URL"), os.environ.get("AGENTGYM_JUDGE_MODEL")
    if not url or not model:
        raise ConfigError("verifier 'judge' needs AGENTGYM_JUDGE_URL (an OpenAI-compatible "
                          "base URL such as http://127.0.0.1:8000/v1) and AGENTGYM_JUDGE_MODEL "
                          "set, or pass verifier=agentgym.judge.judge(url, model, rubric)")
    return judge(url, model, os.environ.get("AGENTGYM_JUDGE_RUBRIC") or None)


BUILTIN: dict[str, Callable[[], Verifier]] = {"exact": exact, "numeric": numeric,
                                              "contains": contains, "judge": judge_from_env}


def resolve(verifier: str | Verifier) -> Verifier:
    """A verifier from a built-in name or a callable; raises ConfigError otherwise."""
    if callable(verifier):
        return verifier
    if isinstance(verifier, str) and verifier in BUILTIN:
        return BUILTIN[verifier]()
    raise ConfigError(
        f"verifier must be one of {sorted(BUILTIN)} or a function (answer, task) -> float, "
        f"got {verifier!r}{did_you_mean(str(verifier), BUILTIN)}"
    )


def score(verifier: Verifier, answer: str, task: Task) -> float:
    """Run ``verifier`` and check its result is a bool or a finite number."""
    return _checked(verifier, verifier(answer, task), task)


async def ascore(verifier: Verifier, answer: str, task: Task) -> float:
    """:func:`score`, awaiting an async verifier (``judge``) without blocking the loop."""
    value = verifier(answer, task)
    if inspect.isawaitable(value):
        value = await value
    return _checked(verifier, value, task)


def _checked(verifier: Verifier, value: Any, task: Task) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    raise TypeError(
        f"the verifier {getattr(verifier, '__name__', verifier)!r} returned {value!r} for task "
        f"{task.id!r}; it must return a bool or a finite number"
    )
