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
  terminates on the engine's task success or task failure (or a full score).
- **Limits** are the benchmark's: the package's ``envStepLimit`` of 100 steps (the default of
  its Python API) ends the episode, as a truncation, on the step past it (``step_limit``;
  None for none). ``help`` and replies without a command make no step; the registered env
  also truncates after 200 turns (``max_turns``) against agents that only send those.
- **Info**: ``valid``, ``score``, ``success``, ``failure``, ``valid_actions`` (the engine's
  list), ``benchmark``. ``state_key`` = a digest of the room description and inventory (the
  current instruction in SimonSays, which has neither).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from agentgym.errors import ConfigError, did_you_mean
from agentgym.types import Message

from ..jvm_env import JVMTextEnv
from . import engine as twx

Split = Literal["train", "dev", "test"]
SPLITS = ("train", "dev", "test")
UNKNOWN_COMMAND = "Unknown action"
STEP_LIMIT = 100
"""The package's default ``envStepLimit``."""

INSTRUCTIONS = """\
You are playing a text game. Complete the task below by typing one command per reply, for \
example <action>look around</action>, <action>move north</action>, <action>open door to \
south</action>, <action>take coin</action> or <action>inventory</action>. Reply with \
<action>help</action> to see the task again."""


class TextWorldExpressEnv(JVMTextEnv):
    """One TextWorldExpress game at a time, on a simulator in a shared JVM.

    Args:
        game: The engine's game name (``coin``, ``cookingworld``, ``twc``, ``mapreader``,
            ``arithmetic``, ``sorting``, ``simonsays``, ``peckingorder``).
        game_params: Generator parameters, e.g. ``"numLocations=5,includeDoors=0"`` or
            ``{"numLocations": 5}``; empty for the engine's defaults.
        split: The benchmark's seed range: ``train``, ``dev`` or ``test``.
        valid_actions_in_info: Put the engine's valid action list in each step's info.
        step_limit: The benchmark's limit on steps (the package's ``envStepLimit``, 100);
            None for no limit.

    Raises:
        ConfigError: an unknown game or split (with the closest names), a bad
            ``step_limit``; no Java runtime.
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
                 split: Split = "train", valid_actions_in_info: bool = True,
                 step_limit: int | None = STEP_LIMIT) -> None:
        super().__init__("TextWorldExpress", twx.pool, twx.make_engine, valid_actions_in_info,
                         step_limit)
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
        self._game_seed: int | None = None

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
        return self._opening(text, info)

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

    # -- helpers ---------------------------------------------------------------------
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

    async def _load_gold(self) -> list[str]:
        await self._generate(gold=True)  # the same game again, now with its gold path
        return list(await self._call(self._engine.getGoldActionSequence))

    def _valid(self, observation: str) -> bool:
        return not observation.startswith(UNKNOWN_COMMAND)

    async def _task_over(self) -> bool:
        # The package's done = success, failure, a full score, or its step limit.
        info = self._info
        return bool(info["tasksuccess"] or info["taskfailure"] or info["score"] >= 1.0)

    def _step_info(self, *, valid: bool) -> dict[str, Any]:
        info: dict[str, Any] = {"valid": valid,
                                "success": bool(self._info.get("tasksuccess", False)),
                                "failure": bool(self._info.get("taskfailure", False)),
                                "score": float(self._info.get("score", 0.0)),
                                "benchmark": twx.version()}
        if self.valid_actions_in_info:
            info["valid_actions"] = list(self._info.get("validActions", ()))
        return info


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

