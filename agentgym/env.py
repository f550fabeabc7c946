"""The environment contract: an async, text- and tool-native Gymnasium.

An env is anything that satisfies :class:`Env`. :class:`BaseEnv` is the optional helper
base: it seeds, counts turns, enforces reset-before-step, fills ``state_key`` into the info
dicts and makes ``aclose`` idempotent, so an env author writes only ``_reset`` and ``_step``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from agentgym.errors import EnvClosedError, ResetNeeded
from agentgym.types import Message, StepResult, ToolSpec

if TYPE_CHECKING:
    from agentgym.registry import EnvSpec


@runtime_checkable
class Env(Protocol):
    """What the rollout engine, the checker and the Gymnasium bridge rely on.

    Attributes:
        spec: The registry entry this env was made from (``None`` when built directly).
        tools: Tools the model may call in this env (empty for plain-text envs).

    An env may also set ``prose_is_action = True`` (read with :func:`accepts_prose`; unset
    means False): a reply without a tool call is then a legitimate action, such as declining
    a request no tool can serve or ending a user turn, and comes back ``valid=True``. Calls
    to unknown tools and malformed calls stay ``valid=False``. ``check_env`` holds an env to
    whichever it declares.
    """

    spec: EnvSpec | None
    tools: Sequence[ToolSpec]

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode.

        Args:
            seed: Seeds the env's randomness; the same seed gives the same task.
            options: Env-specific reset options (e.g. ``{"task_id": ...}``).

        Returns:
            The first messages the model reads (system prompt, task) and an info dict, with
            ``task_id`` and ``state_key`` when the env has them.
        """
        ...

    async def step(self, action: Message) -> StepResult:
        """Apply one assistant message (which may hold several tool calls).

        Agent mistakes (no tool call, unless the env sets ``prose_is_action``; unknown tool;
        bad arguments) come back as observations with ``info["valid"] = False``; they never
        raise.
        """
        ...

    async def aclose(self) -> None:
        """Release containers, browsers, sockets. Safe to call twice."""
        ...


def accepts_prose(env: Env) -> bool:
    """Whether ``env`` declares a reply without a tool call a legitimate action.

    True when the env (or the env a wrapper holds) sets ``prose_is_action = True``. A
    plain-text env (no tools) takes text as its action whatever it sets.
    """
    return getattr(env, "prose_is_action", False) is True


class BaseEnv:
    """Helper base for envs: seeding, turn counting, state checks, ``async with``.

    Subclasses implement :meth:`_reset` and :meth:`_step`, and optionally
    :meth:`state_key` and :meth:`_close`.

    Example:
        >>> import asyncio
        >>> from agentgym import BaseEnv, Message, StepResult
        >>> class Echo(BaseEnv):
        ...     async def _reset(self, seed, options):
        ...         return [Message("user", "say hi")], {}
        ...     async def _step(self, action):
        ...         ok = action.content.strip() == "hi"
        ...         return StepResult((Message("user", "ok" if ok else "no"),),
        ...                           reward=float(ok), terminated=True)
        >>> async def main():
        ...     async with Echo() as env:
        ...         await env.reset(seed=0)
        ...         return (await env.step(Message("assistant", "hi"))).reward
        >>> asyncio.run(main())
        1.0
    """

    spec: EnvSpec | None = None
    tools: Sequence[ToolSpec] = ()
    prose_is_action: bool = False
    """Whether a reply without a tool call is a legitimate action (see :class:`Env`)."""

    def __init__(self) -> None:
        self._np_random: np.random.Generator | None = None
        self._needs_reset = True
        self._closed = False
        self.turn = 0
        """Number of steps taken in the current episode."""

    # -- to implement -----------------------------------------------------------------
    async def _reset(
        self, seed: int | None, options: Mapping[str, Any]
    ) -> tuple[Sequence[Message], dict[str, Any]]:
        raise NotImplementedError

    async def _step(self, action: Message) -> StepResult:
        raise NotImplementedError

    def state_key(self) -> str | None:
        """Fingerprint of the current raw state (not the templated prompt); None if none."""
        return None

    async def _close(self) -> None:
        """Release resources; called once by :meth:`aclose`."""

    # -- the contract -----------------------------------------------------------------
    @property
    def np_random(self) -> np.random.Generator:
        """The episode's random generator, seeded by ``reset(seed=...)``."""
        if self._np_random is None:
            self._np_random = np.random.default_rng()
        return self._np_random

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode; see :meth:`Env.reset`."""
        self._check_open("reset")
        if seed is not None:
            if not isinstance(seed, int | np.integer) or seed < 0:
                raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
            self._np_random = np.random.default_rng(int(seed))
        observation, info = await self._reset(seed, dict(options or {}))
        self.turn = 0
        self._needs_reset = False
        info = dict(info)
        key = self.state_key()
        if key is not None:
            info.setdefault("state_key", key)
        return list(observation), info

    async def step(self, action: Message) -> StepResult:
        """Apply one action; see :meth:`Env.step`."""
        self._check_open("step")
        if self._needs_reset:
            raise ResetNeeded(
                f"{type(self).__name__}.step() was called "
                + ("before reset()" if self.turn == 0 else "after the episode ended")
                + "; call `await env.reset(seed=...)` to start an episode"
            )
        if not isinstance(action, Message):
            raise TypeError(
                f"step() expects an agentgym.Message, got {type(action).__name__}; "
                f'wrap text as Message("assistant", text)'
            )
        result = await self._step(action)
        self.turn += 1
        key = self.state_key()
        if key is not None and "state_key" not in result.info:
            result = StepResult(result.observation, result.reward, result.terminated,
                                result.truncated, {**result.info, "state_key": key})
        if result.done:
            self._needs_reset = True
        return result

    async def aclose(self) -> None:
        """Release resources; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has run."""
        return self._closed

    async def __aenter__(self) -> BaseEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _check_open(self, method: str) -> None:
        if self._closed:
            raise EnvClosedError(
                f"{type(self).__name__}.{method}() was called after aclose(); make a new env "
                "with agentgym.make(...)"
            )

    def __repr__(self) -> str:
        name = self.spec.id if self.spec is not None else type(self).__name__
        return f"<{type(self).__name__} {name}>"
