"""Every agentgym env as a real, synchronous ``gymnasium.Env``.

``agentgym.register`` also registers each id in Gymnasium's registry, so after
``import agentgym`` (or with the ``"agentgym:"`` module prefix, which imports it)::

    env = gymnasium.make("agentgym:agentgym/Sokoban-v0")
    obs, info = env.reset(seed=0)          # obs: the observation text
    obs, reward, terminated, truncated, info = env.step("<action>up</action>")

Observations and actions are :class:`UnicodeText` spaces: any string of valid Unicode code
points. The action text becomes ``Message("assistant", action)``; the full observation
messages are in ``info["messages"]`` and the tools in the reset info's ``"tools"``. A reward
of ``None`` ("not scored here") is reported to Gymnasium as 0.0 with ``info["scored"] = False``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar, cast

import gymnasium
import numpy as np
from gymnasium import spaces

from agentgym.types import Message

if TYPE_CHECKING:
    from agentgym.env import Env
    from agentgym.registry import EnvSpec

T = TypeVar("T")
_SURROGATES = (0xD800, 0xDFFF)
_N_CODEPOINTS = 0x110000 - (_SURROGATES[1] - _SURROGATES[0] + 1)


class UnicodeText(spaces.Text):
    """A ``spaces.Text`` whose charset is every Unicode scalar value (all but surrogates).

    Membership and sampling work on code points directly; the explicit character
    collections that ``spaces.Text`` keeps are built only if someone asks for them.
    """

    def __init__(self, max_length: int, *, min_length: int = 0,
                 seed: int | np.random.Generator | None = None) -> None:
        if not 0 <= min_length <= max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length}, {max_length}")
        self.min_length, self.max_length = int(min_length), int(max_length)
        spaces.Space.__init__(self, dtype=str, seed=seed)

    def contains(self, x: Any) -> bool:
        """Any str of allowed length with no lone surrogate."""
        if not isinstance(x, str) or not self.min_length <= len(x) <= self.max_length:
            return False
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A uniformly random length and uniformly random code points."""
        if mask is not None or probability is not None:
            raise NotImplementedError("UnicodeText.sample does not support masks")
        length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        points = self.np_random.integers(0, _N_CODEPOINTS, size=length)
        points = np.where(points >= _SURROGATES[0], points + (_SURROGATES[1] - _SURROGATES[0] + 1),
                          points)
        return "".join(map(chr, points.tolist()))

    @cached_property
    def _char_list(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(chr(c) for c in range(0x110000) if not _SURROGATES[0] <= c <= _SURROGATES[1])

    @cached_property
    def _char_set(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(self._char_list)

    @cached_property
    def _char_index(self) -> dict[str, np.int32]:  # type: ignore[override]
        return {c: np.int32(i) for i, c in enumerate(self._char_list)}

    @cached_property
    def _char_str(self) -> str:  # type: ignore[override]
        return "".join(self._char_list)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, UnicodeText) and self.min_length == other.min_length
                and self.max_length == other.max_length)


class _LoopThread:
    """One background event loop per process that runs the async envs' coroutines."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid: int | None = None

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, T]) -> T:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():  # new process after fork
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="agentgym-gym-bridge",
                                 daemon=True).start()
                cls._loop, cls._pid = loop, os.getpid()
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, cls._loop)
        return future.result()


def render_observation(messages: Sequence[Message]) -> str:
    """The observation text Gymnasium users see: the messages' contents, blank-line separated."""
    return "\n\n".join(m.content for m in messages)


class GymnasiumEnv(gymnasium.Env[str, str]):
    """Synchronous Gymnasium view of an agentgym env.

    Args:
        env: The async env.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation text).
        max_observation_length: Longest observation string; longer text is cut with a marker.
        max_action_length: Longest action string the action space holds.
    """

    # render_fps only silences Gymnasium's checker: a text env has no frame rate.
    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012

    def __init__(self, env: Env, render_mode: str | None = None,
                 max_observation_length: int = 1_000_000, max_action_length: int = 4096) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = env
        self.render_mode = render_mode
        self.observation_space = UnicodeText(max_observation_length)
        self.action_space = UnicodeText(max_action_length)
        self._last = ""

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode (a seed of None draws one from the seeded generator)."""
        super().reset(seed=seed)
        inner_seed = int(self.np_random.integers(2**31 - 1)) if seed is None else seed
        messages, info = _LoopThread.run(self.env.reset(seed=inner_seed, options=options))
        info = {**info, "messages": [m.to_dict() for m in messages],
                "tools": [t.to_dict() for t in self.env.tools]}
        return self._text(messages), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Send the action text as an assistant message."""
        message = action if isinstance(action, Message) else Message("assistant", str(action))
        result = _LoopThread.run(self.env.step(message))
        info = {**result.info, "messages": [m.to_dict() for m in result.observation],
                "scored": result.reward is not None}
        reward = 0.0 if result.reward is None else float(result.reward)
        return (self._text(result.observation), reward, bool(result.terminated),
                bool(result.truncated), info)

    def render(self) -> str | None:  # type: ignore[override]
        """The last observation text in ``ansi`` mode."""
        return self._last if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the async env; safe to call twice."""
        _LoopThread.run(self.env.aclose())

    def _text(self, messages: Sequence[Message]) -> str:
        from agentgym.wrappers import clean_text

        marker_room = 64
        space = cast(spaces.Text, self.observation_space)
        text = clean_text(render_observation(messages), space.max_length - marker_room)
        self._last = text
        return text


def make_gymnasium(env_id: str, render_mode: str | None = None, **kwargs: Any) -> GymnasiumEnv:
    """Gymnasium entry point: ``agentgym.make(env_id, **kwargs)`` behind :class:`GymnasiumEnv`."""
    from agentgym.registry import make

    return GymnasiumEnv(make(env_id, **kwargs), render_mode=render_mode)


def register_in_gymnasium(spec: EnvSpec) -> None:
    """Register ``spec.id`` in Gymnasium's registry, pointing at :func:`make_gymnasium`."""
    gymnasium.registry.pop(spec.id, None)  # agentgym's registry is the source of truth
    gymnasium.register(id=spec.id, entry_point="agentgym.gym_bridge:make_gymnasium",
                       kwargs={"env_id": spec.id})
