"""TextArena's single-player games as text envs: its engine, its prompts, its scores.

Each episode is one TextArena game (the ``-raw`` variant, without TextArena's observation
wrappers) reset with the episode's seed. The first observation is TextArena's own prompt and
board; each step sends the reply text to the game unchanged and shows the game's new
messages (its move descriptions, boards and complaints; the echo of the move is left out).

Reward is TextArena's: ``None`` (not scored) while the game runs, then the game's final
reward when it ends: 1 for a win, else the game's partial-completion score in [0, 1].
``success`` is a win (reward 1). A move the game rejects (bad format, illegal move) is
``valid=False``; TextArena itself allows one such mistake in a row and ends the game on the
second. The game's own turn limit ends the episode (``terminated``).

TextArena draws its randomness from Python's global ``random`` (and some games from numpy's
global generator). So that concurrent episodes stay reproducible, every call into the engine
runs with this env's own saved generator states swapped in (calls never await, so no other
episode runs in between).

Info keys on every step: ``valid``, ``success``, ``benchmark`` (``"textarena <version>"``);
at the end also ``reason`` (the game's
verdict). The reset info has ``task_id``, ``game`` and ``textarena_version``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any

import numpy as np

from agentgym.env import BaseEnv
from agentgym.errors import ConfigError, MissingExtraError, did_you_mean
from agentgym.types import Message, StepResult

from .experts import EXPERTS
from .games import GAMES

MAX_ACTION_CHARS = 1_000_000
"""Replies longer than this are cut before the game reads them. The games' move patterns are
linear-time regexes, so this only bounds memory; a model's reasoning before its move (often
thousands of characters) reaches the game whole, as in TextArena."""


class TextArenaEnv(BaseEnv):
    """One TextArena single-player game; see the module docstring.

    Args:
        game: A game name from :data:`~agentgym.envs.textarena.games.GAMES`.

    Raises:
        ConfigError: an unknown game (with the closest names).
        MissingExtraError: textarena is not installed.

    Attributes:
        engine: The underlying TextArena game (its ``-raw`` variant).
    """

    def __init__(self, game: str = "FrozenLake") -> None:
        super().__init__()
        if game not in GAMES:
            raise ConfigError(f"expected game to be one of {sorted(GAMES)}, got {game!r}"
                              f"{did_you_mean(str(game), GAMES)}; fix: pass game='FrozenLake'")
        try:
            import textarena
        except ImportError as exc:
            raise MissingExtraError("textarena", "games", "the TextArena envs") from exc
        self.game = game
        self.benchmark = f"textarena {version('textarena')}"
        self.engine: Any = textarena.make(f"{GAMES[game]}-raw")
        self._py_state = random.Random().getstate()
        self._np_state = np.random.RandomState().get_state()
        self._board = self._last_text = ""
        self.task_id = ""

    @contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Run engine code on this episode's generators, restoring the global ones after."""
        saved_py, saved_np = random.getstate(), np.random.get_state()
        random.setstate(self._py_state)
        np.random.set_state(self._np_state)
        try:
            yield
        finally:
            self._py_state, self._np_state = random.getstate(), np.random.get_state()
            random.setstate(saved_py)
            np.random.set_state(saved_np)

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[list[Message], dict[str, Any]]:
        if options:
            raise ConfigError(f"TextArenaEnv.reset takes no options, got {sorted(options)}; "
                              "fix: choose the game instance with seed=")
        if seed is None:  # draw one, so task_id names a game reset(seed=...) rebuilds
            seed = int(self.np_random.integers(2**31 - 1))
        with self._own_rng():
            self._board = ""
            random.seed(seed)
            np.random.seed(seed)
            self.engine.reset(num_players=1, seed=seed)
            text = self._new_messages()
        self.task_id = f"textarena-{self.game}-seed{seed}"
        info = {"task_id": self.task_id, "game": self.game,
                "textarena_version": version("textarena")}
        return [Message("user", text)], info

    async def _step(self, action: Message) -> StepResult:
        move = action.content[:MAX_ACTION_CHARS]
        try:
            with self._own_rng():
                done, _ = self.engine.step(move)
                text = self._new_messages()
        except Exception as exc:  # a game that chokes on odd text: the move is rejected
            return StepResult((Message("user", f"error: the game could not read this move "
                                               f"({type(exc).__name__}: {exc}). Try again."),),
                              None, terminated=False,
                              info={"benchmark": self.benchmark, "valid": False, "success": False})
        state = self.engine.state
        game_info = state.game_info.get(0, {})
        # TextArena clears its invalid-move flag within step(); its error count survives it.
        valid = state.error_count == 0 and not game_info.get("invalid_move", False)
        if not done:
            return StepResult((Message("user", text or "(no change)"),), None,
                              terminated=False,
                              info={"benchmark": self.benchmark, "valid": valid, "success": False})
        rewards, _ = self.engine.close()
        reward = float(rewards[0])
        reason = str(game_info.get("reason", ""))
        text = f"{text}\n\nGame over: {reason}" if reason else text
        return StepResult((Message("user", text),), reward, terminated=True,
                          info={"benchmark": self.benchmark, "valid": valid,
                                "success": reward >= 1.0, "reason": reason})

    def state_key(self) -> str | None:
        """The game and a digest of TextArena's full game state (board, secrets, history)."""
        if not self.task_id:
            return None
        game_state = self.engine.state.game_state
        blob = json.dumps(game_state, sort_keys=True, default=str)
        return f"{self.task_id}|{hashlib.sha1(blob.encode()).hexdigest()[:16]}"

    def render(self) -> str:
        """The last board the game showed (its own text), else its last message."""
        if not self.task_id:
            raise RuntimeError("TextArenaEnv.render() before reset(); call `await env.reset()`")
        return self._board or self._last_text

    def expert_action(self) -> Message:
        """The next oracle move, read from the game's hidden state (see :mod:`.experts`).

        Raises:
            RuntimeError: before ``reset``, or for a game without an oracle.
        """
        expert = EXPERTS.get(self.game)
        if expert is None:
            raise RuntimeError(f"TextArena {self.game} has no expert; games with one: "
                               f"{sorted(EXPERTS)}")
        if not self.task_id:
            raise RuntimeError("TextArenaEnv.expert_action() before reset(); call "
                               "`await env.reset(seed=...)` first")
        return Message("assistant", expert(self.engine))

    def _new_messages(self) -> str:
        """The game's messages since the last call, without the echo of the player's move."""
        import textarena

        _, messages = self.engine.get_observation()
        parts = []
        for _, text, kind in messages:
            if kind == textarena.ObservationType.PLAYER_ACTION:
                continue
            if kind == textarena.ObservationType.GAME_BOARD:
                self._board = str(text)
            parts.append(str(text).strip())
        text = "\n\n".join(p for p in parts if p)
        self._last_text = text or self._last_text
        return text
