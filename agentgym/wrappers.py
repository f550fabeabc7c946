"""Env wrappers, named for their effect: :class:`MaxTurns` and :class:`ObservationCap`."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from agentgym.env import Env
from agentgym.errors import ResetNeeded
from agentgym.types import Message, StepResult

TRUNCATION_MARKER = "\n…[truncated {n} characters]"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def clean_text(text: str, max_chars: int | None = None) -> str:
    """Make text safe to log and tokenize: valid UTF-8, bounded length.

    Lone surrogates (text decoded with ``surrogateescape`` from non-UTF-8 bytes) become
    U+FFFD and NUL characters are dropped; text over ``max_chars`` keeps its head and ends
    with a marker saying how much was cut.
    """
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", errors="replace") if isinstance(
            text, bytes | bytearray) else str(text)
    # str.encode(errors="replace") would give "?", not U+FFFD
    text = _SURROGATE_RE.sub("\ufffd", text).replace("\x00", "")
    if max_chars is not None and len(text) > max_chars:
        cut = len(text) - max_chars
        text = text[:max_chars] + TRUNCATION_MARKER.format(n=cut)
    return text


class Wrapper:
    """Base for wrappers: forwards everything to the wrapped env."""

    def __init__(self, env: Env) -> None:
        self.env = env

    @property
    def spec(self) -> Any:
        """The wrapped env's spec."""
        return self.env.spec

    @property
    def tools(self) -> Any:
        """The wrapped env's tools."""
        return self.env.tools

    @property
    def unwrapped(self) -> Env:
        """The innermost env."""
        env = self.env
        return env.unwrapped if isinstance(env, Wrapper) else env

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Reset the wrapped env."""
        return await self.env.reset(seed=seed, options=options)

    async def step(self, action: Message) -> StepResult:
        """Step the wrapped env."""
        return await self.env.step(action)

    async def aclose(self) -> None:
        """Close the wrapped env (idempotent if it is)."""
        await self.env.aclose()

    async def __aenter__(self) -> Wrapper:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "env":  # "env" unset: not yet initialised
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{self.env!r}>"


class MaxTurns(Wrapper):
    """Truncate the episode after ``max_turns`` steps (Gymnasium's ``TimeLimit``)."""

    def __init__(self, env: Env, max_turns: int) -> None:
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        super().__init__(env)
        self.max_turns = max_turns
        self._turns: int | None = None

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Reset and restart the turn count."""
        out = await self.env.reset(seed=seed, options=options)
        self._turns = 0
        return out

    async def step(self, action: Message) -> StepResult:
        """Step; set ``truncated`` when the turn budget is spent."""
        if self._turns is None:
            raise ResetNeeded(
                "MaxTurns.step() was called before reset() or after the episode ended; "
                "call `await env.reset(seed=...)` first"
            )
        result = await self.env.step(action)
        self._turns += 1
        if result.done:
            self._turns = None
        elif self._turns >= self.max_turns:
            self._turns = None
            result = replace(result, truncated=True,
                             info={**result.info, "truncated_by": "max_turns"})
        return result


class ObservationCap(Wrapper):
    """Cap each observation message at ``max_chars`` characters and clean invalid UTF-8."""

    def __init__(self, env: Env, max_chars: int) -> None:
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars must be a positive int, got {max_chars!r}")
        super().__init__(env)
        self.max_chars = max_chars

    def _cap(self, messages: Any) -> list[Message]:
        return [replace(m, content=clean_text(m.content, self.max_chars)) for m in messages]

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Reset, capping the first observation."""
        observation, info = await self.env.reset(seed=seed, options=options)
        return self._cap(observation), info

    async def step(self, action: Message) -> StepResult:
        """Step, capping the observation."""
        result = await self.env.step(action)
        return replace(result, observation=tuple(self._cap(result.observation)))
