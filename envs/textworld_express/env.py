"""TextWorldExpress (Jansen & Côté 2022) as agentgym envs: fast generated text games.

Games, generation, scoring and gold paths come from the installed ``textworld-express``
package (its bundled jar, run in a pooled JVM, see :mod:`agentgym.envs.jvm`). One env id per
game: CoinCollector (``coin``), CookingWorld, TextWorld-Commonsense (``twc``, the
ALFWorld-like household tidy-up), MapReader, Arithmetic, Sorting, SimonSays, PeckingOrder.

- **Generator parameters**: ``game_params`` as the engine takes them (``"numLocations=5,
  includeDoors=0"`` or a mapping); empty means the engine's defaults. The engine validates
  them at the first reset and its message comes back as a ConfigError.
- **Splits** are the benchmark's seed ranges: ``train``, ``dev`` and ``test`` (1,000 game
  seeds each); seed ``s`` plays the split's game seed number ``s % 1000``.
- **Actions** are free text, one command a turn, read by
  :func:`~agentgym.envs.text_commands.parse_command`; an unknown command comes back with the
  engine's message and ``valid=False``; an empty reply costs no move.
- **Reward** is the benchmark's score change (its score is normalised to 0..1); the episode
  terminates on the engine's task success or task failure. The turn limit truncates.
- **Info**: ``valid``, ``score``, ``success``, ``failure``, ``valid_actions`` (the engine's
  list), ``benchmark``. ``state_key`` = a digest of the room description and inventory (the
  current instruction in SimonSays, which has neither).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from agentgym.env import BaseEnv
from agentgym.errors import ConfigError, EnvStateError, did_you_mean
from agentgym.types import Message, StepResult

from ..jvm import JavaError, Lease, call_engine
from ..text_commands import parse_command
from . import engine as twx

Split = Literal["train", "dev", "test"]
SPLITS = ("train", "dev", "test")
UNKNOWN_COMMAND = "Unknown action"

INSTRUCTIONS = """\
You are playing a text game. Complete the task below by typing one command per reply, for \
example <action>look around</action>, <action>move north</action>, <action>open door to \
south</action>, <action>take coin</action> or <action>inventory</action>. Reply with \
<action>help</action> to see the task again."""


class TextWorldExpressEnv(BaseEnv):
    """One TextWorldExpress game at a time, on a simulator in a shared JVM.

    Args:
        game: The engine's game name (``coin``, ``cookingworld``, ``twc``, ``mapreader``,
            ``arithmetic``, ``sorting``, ``simonsays``, ``peckingorder``).
        game_params: Generator parameters, e.g. ``"numLocations=5,includeDoors=0"`` or
            ``{"numLocations": 5}``; empty for the engine's defaults.
        split: The benchmark's seed range: ``train``, ``dev`` or ``test``.
        valid_actions_in_info: Put the engine's valid action list in each step's info.

    Raises:
        ConfigError: an unknown game or split (with the closest names); no Java runtime.
        MissingExtraError: the ``textworld-express`` package is not installed.

    Example:
        >>> import asyncio
        >>> from agentgym import Message
        >>> async def play_gold():
        ...     env = TextWorldExpressEnv("coin", "numLocations=3,includeDoors=0")
        ...     await env.reset(seed=0)
        ...     while not (result := await env.step(await env.expert_action())).done:
        ...         pass
        ...     await env.aclose()
        ...     return result.info["success"]
        >>> asyncio.run(play_gold())
        True
    """

    def __init__(self, game: str = "coin", game_params: str | Mapping[str, Any] = "",
                 split: Split = "train", valid_actions_in_info: bool = True) -> None:
        super().__init__()
        names = twx.game_names()
        if game not in names:
            raise ConfigError(f"unknown TextWorldExpress game {game!r}; expected one of "
                              f"{names}{did_you_mean(str(game), names)}")
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {list(SPLITS)}, got {split!r}"
                              f"{did_you_mean(str(split), SPLITS)}")
        self.game = game
        self.game_params = _params_text(game_params)
        self.split = split
        self.valid_actions_in_info = valid_actions_in_info
        self._lease: Lease | None = None
        self._engine: Any = None
        self._info: dict[str, Any] = {}  # the engine's last response
        self._game_seed: int | None = None
        self._gold: list[str] | None = None
        self._commands: list[str] = []

    # -- episode ---------------------------------------------------------------------
    async def _reset(self, seed: int | None, options: Mapping[str, Any],
                     ) -> tuple[list[Message], dict[str, Any]]:
        if options:
            raise ConfigError(f"expected no reset options, got {sorted(options)}; the seed "
                              "picks the game (seed s plays the split's game seed s % 1000)")
        if seed is None:  # draw one, so task_id names an episode reset(seed=...) rebuilds
            seed = int(self.np_random.integers(2**31))
        engine = await self._ensure_engine()
        seeds = await self._call(_split_seeds, engine, self.game, self.split)
        self._game_seed = seeds[seed % len(seeds)]
        await self._generate(gold=False)
        properties = await self._call(engine.getGenerationProperties)
        text = (f"{INSTRUCTIONS}\n\nTask: {self._info['taskDescription'].strip()}\n\n"
                f"{self._info['observation'].strip()}")
        params = f"-{self.game_params.replace(',', '-')}" if self.game_params else ""
        info = {"task_id": f"twx-{self.game}{params}-{self.split}-{self._game_seed}",
                "game": self.game, "game_seed": self._game_seed, "split": self.split,
                "generation": properties, "benchmark": twx.version()}
        if self.valid_actions_in_info:
            info["valid_actions"] = self._step_info(valid=True)["valid_actions"]
        return [Message("user", text)], info

    async def _step(self, action: Message) -> StepResult:
        command = parse_command(action.content)
        if not command:
            text = ("Your reply held no command. Reply with one command, e.g. "
                    "<action>look around</action>.")
            return StepResult((Message("user", text),), 0.0, terminated=False,
                              info=self._step_info(valid=False))
        self._commands.append(command)
        try:
            observation, reward, _, info = await self._call(self._engine.step, command)
        except JavaError as exc:  # the engine choked on this input: the agent's mistake
            text = f"The command {command!r} could not be carried out."
            return StepResult((Message("user", text),), 0.0, terminated=False,
                              info={**self._step_info(valid=False), "error": str(exc)[:200]})
        self._info = info
        valid = not observation.startswith(UNKNOWN_COMMAND)
        # The package's own `done` also fires at its step limit; we leave that to MaxTurns.
        ended = bool(info["tasksuccess"] or info["taskfailure"] or info["score"] >= 1.0)
        return StepResult((Message("user", observation.strip()),), float(reward),
                          terminated=ended, truncated=False, info=self._step_info(valid=valid))

    def state_key(self) -> str | None:
        """Digest of the room description and inventory (the instruction in SimonSays)."""
        if not self._info:
            return None
        look, inventory = self._info.get("look", ""), self._info.get("inventory", "")
        state = f"{look}\n{inventory}" if look.strip() else self._info.get("observation", "")
        return f"{self.game}|{hashlib.sha1(state.encode()).hexdigest()[:16]}"

    def render(self) -> str:
        """The task, the current room, the inventory and the score, as text."""
        if not self._info:
            return "TextWorldExpress: not reset yet"
        parts = [self._info.get("taskDescription", ""), self._info.get("look", "")
                 or self._info.get("observation", ""), self._info.get("inventory", ""),
                 f"Score: {self._info.get('score', 0)}"]
        return "\n\n".join(p.strip() for p in parts if p.strip())

    async def expert_action(self) -> Message:
        """The next command of the engine's gold path for this game.

        Raises:
            EnvStateError: before reset, after the episode left the gold path, or past its end.
        """
        if self._game_seed is None:
            raise EnvStateError("TextWorldExpressEnv.expert_action() before reset(); call "
                                "`await env.reset(seed=...)` first")
        if self._gold is None:
            if self._commands:
                raise EnvStateError("TextWorldExpressEnv.expert_action(): the gold path is made "
                                    "when the game is generated; ask for it before the first "
                                    "move")
            await self._generate(gold=True)  # the same game again, now with its gold path
            self._gold = list(await self._call(self._engine.getGoldActionSequence))
        done = len(self._commands)
        if self._commands != self._gold[:done]:
            raise EnvStateError("TextWorldExpressEnv.expert_action(): the episode left the "
                                f"gold path at move {done}; it only replays from the start")
        if done >= len(self._gold):
            raise EnvStateError("TextWorldExpressEnv.expert_action(): the gold path is "
                                "exhausted but the game has not ended")
        return Message("assistant", self._gold[done])

    async def _close(self) -> None:
        if self._lease is not None:
            engine, lease = self._engine, self._lease
            self._engine = self._lease = None
            engine.close()
            twx.pool().release(lease, engine.server)

    # -- helpers ---------------------------------------------------------------------
    async def _ensure_engine(self) -> Any:
        if self._engine is None:
            self._lease = await asyncio.to_thread(twx.pool().lease)
            self._engine = await self._call(twx.make_engine, self._lease)
        return self._engine

    async def _generate(self, gold: bool) -> None:
        engine = await self._ensure_engine()
        try:
            _, self._info = await self._call(lambda: engine.reset(
                seed=self._game_seed, gameFold=self.split, gameName=self.game,
                gameParams=self.game_params, generateGoldPath=gold))
        except ValueError as exc:  # the engine's check of the generator parameters
            raise ConfigError(f"TextWorldExpress rejected game_params={self.game_params!r} "
                              f"for {self.game!r}: {str(exc).strip()}") from None
        self._commands, self._gold = [], None

    def _step_info(self, *, valid: bool) -> dict[str, Any]:
        info: dict[str, Any] = {"valid": valid,
                                "success": bool(self._info.get("tasksuccess", False)),
                                "failure": bool(self._info.get("taskfailure", False)),
                                "score": float(self._info.get("score", 0.0)),
                                "benchmark": twx.version()}
        if self.valid_actions_in_info:
            info["valid_actions"] = list(self._info.get("validActions", ()))
        return info

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await call_engine(fn, *args, engine="TextWorldExpress")


def _params_text(params: str | Mapping[str, Any]) -> str:
    if isinstance(params, Mapping):
        return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in params.items())
    if not isinstance(params, str):
        raise ConfigError(f"game_params must be a string like 'numLocations=5,includeDoors=0' "
                          f"or a mapping, got {type(params).__name__}")
    return ",".join(p.strip() for p in params.split(",") if p.strip())


_SPLIT_SEEDS: dict[tuple[str, str], list[int]] = {}


def _split_seeds(engine: Any, game: str, split: str) -> list[int]:
    """The benchmark's game seeds of ``split`` (queried once per process)."""
    if (game, split) not in _SPLIT_SEEDS:
        getter = {"train": engine.getValidSeedsTrain, "dev": engine.getValidSeedsDev,
                  "test": engine.getValidSeedsTest}[split]
        _SPLIT_SEEDS[game, split] = list(getter())
    return _SPLIT_SEEDS[game, split]

