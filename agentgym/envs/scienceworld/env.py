"""ScienceWorld (Wang et al. 2022) as an agentgym env: 30 science task types in a text world.

The simulator, its tasks, variations, scoring and gold paths all come from the installed
``scienceworld`` package (its bundled jar, run in a pooled JVM, see :mod:`agentgym.envs.jvm`).

- **Tasks.** ``task=None`` covers every task type: seed ``s`` plays task type ``s % 30`` on
  variation ``(s // 30) % n`` of the split (``n`` variations). ``task="boil"`` (a task name,
  a task id such as ``"1-1"`` or the paper's name) fixes the type; seed ``s`` then plays
  variation ``s % n``. ``options={"task": ..., "variation": ...}`` picks one exactly.
- **Splits** are the benchmark's own variation splits: ``train``, ``dev``, ``test``.
- **Actions** are free text, one command a turn (``open door to kitchen``), read by
  :func:`~agentgym.envs.text_commands.parse_command`. A command the engine does not know
  comes back with its own message and ``valid=False``; an empty reply costs no move.
- **Reward** is the benchmark's score change this turn (score points, 0 to 100), as the
  package computes it; the episode terminates when the benchmark says it is complete: score
  100 (``success``) or a failure state (score below 0, e.g. focusing on the wrong object).
  The episode's outcome (``info["outcome_reward"]``) is the benchmark's final score, negative
  scores counted as 0 as the package's own example agent averages them; it differs from the
  sum of rewards where a task starts with points (lifespan tasks start at 50 when the agent
  starts where the animals are).
- **Limits** are the benchmark's: the package's ``envStepLimit`` of 100 moves (its default,
  and the limit of the paper's reference agents, ``drrn-scienceworld --env_step_limit=100``,
  and of SwiftSage) ends the episode, as a truncation, on the move that takes the engine's
  move count past it (``step_limit``; None for none). Moves are the engine's: ``wait`` costs
  ten, looking around none. The registered env also truncates after 200 turns
  (``max_turns``, SwiftSage's guard of twice the step limit against free actions). Some
  gold paths do not fit 100 moves on the benchmark's own engine either (mendelian genetics,
  the friction tasks): to replay them whole, pass ``step_limit=None, max_turns=300``.
- **Info** on every step: ``valid``, ``score``, ``success``, ``moves``, ``outcome_reward``,
  ``valid_actions`` (the benchmark's valid action-object combinations, unless
  ``valid_actions_in_info=False``), ``benchmark`` (the package version). ``state_key`` = room
  + a digest of the room's full description and the inventory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Literal

from agentgym.errors import ConfigError, did_you_mean
from agentgym.types import Message

from ..jvm_env import JVMTextEnv
from . import engine as sw

Split = Literal["train", "dev", "test"]
SPLITS = ("train", "dev", "test")
UNKNOWN_COMMAND = "No known action matches that input."

INSTRUCTIONS = """\
You are an agent in ScienceWorld, a simulated world of rooms, objects, substances, living \
things and devices. Complete the task below by typing one command per reply, for example \
<action>look around</action> or <action>open door to kitchen</action>. Commands have these \
forms (OBJ is an object you can see): {templates}. When the game asks you to pick among \
numbered options, reply with the number. Focus (`focus on OBJ`) only on what the task asks \
you to focus on: focusing on the wrong thing ends the task as a failure."""

STEP_LIMIT = 100
"""The package's default ``envStepLimit``, and its reference agents' (see the module doc)."""

_ROOM = re.compile(r"This (?:room|area|outside location) is called the ([^.]+)\.")
_VARIATION_SPLITS: dict[str, dict[str, list[int]]] = {}


class ScienceWorldEnv(JVMTextEnv):
    """One ScienceWorld episode at a time, on a simulator in a shared JVM.

    Args:
        task: A task type (name such as ``"boil"``, id such as ``"1-1"``), or None for all 30.
        split: The benchmark's variation split: ``train``, ``dev`` or ``test``.
        simplifications: The benchmark's simplification string, e.g. ``"easy"`` or
            ``"openDoors,teleportAction"`` (empty: none, as in the paper's main results).
        valid_actions_in_info: Put the valid action list (hundreds of strings) in each info.
        step_limit: The benchmark's limit on moves (the package's ``envStepLimit``, 100);
            None for no limit.

    Raises:
        ConfigError: an unknown task or split (with the closest names), a bad
            ``step_limit``, or no Java runtime.
        MissingExtraError: the ``scienceworld`` package is not installed.

    Example:
        >>> import asyncio
        >>> from agentgym import Message
        >>> async def first_move():
        ...     env = ScienceWorldEnv(task="boil", split="dev")
        ...     _, info = await env.reset(seed=0)
        ...     result = await env.step(Message("assistant", "<action>look around</action>"))
        ...     await env.aclose()
        ...     return info["task_id"], result.info["valid"]
        >>> asyncio.run(first_move())
        ('scienceworld-boil-dev-14', True)
    """

    def __init__(self, task: str | None = None, split: Split = "train",
                 simplifications: str = "", valid_actions_in_info: bool = True,
                 step_limit: int | None = STEP_LIMIT) -> None:
        super().__init__("ScienceWorld", sw.pool, sw.make_engine, valid_actions_in_info,
                         step_limit)
        self.task = None if task is None else resolve_task(task)
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {list(SPLITS)}, got {split!r}"
                              f"{did_you_mean(str(split), SPLITS)}")
        self.split = split
        self.simplifications = simplifications
        self._episode: tuple[str, int] | None = None

    # -- episode ---------------------------------------------------------------------
    async def _reset(self, seed: int | None, options: Mapping[str, Any],
                     ) -> tuple[list[Message], dict[str, Any]]:
        unknown = sorted(set(options) - {"task", "variation"})
        if unknown:
            raise ConfigError(f"expected reset options among ['task', 'variation'], got "
                              f"{unknown}; pass e.g. options={{'task': 'boil', 'variation': 3}}")
        if seed is None:  # draw one, so task_id names an episode reset(seed=...) rebuilds
            seed = int(self.np_random.integers(2**31))
        task = resolve_task(options["task"]) if "task" in options else self.task
        index = seed
        if task is None:
            names = sw.task_names()
            task, index = names[seed % len(names)], seed // len(names)
        engine = await self._ensure_engine()
        variations = await self._call(_split_variations, engine, task, self.split)
        variation = int(options.get("variation", variations[index % len(variations)]))
        await self._load(task, variation, gold=False)
        self._episode = (task, variation)
        description = self._info.get("taskDesc", "").strip()
        templates = ", ".join(await self._call(engine.get_possible_actions))
        text = (f"{INSTRUCTIONS.format(templates=templates)}\n\n{description}\n\n"
                f"{self._observation.strip()}")
        info = {"task_id": f"scienceworld-{task}-{self.split}-{variation}", "task": task,
                "variation": variation, "split": self.split, "benchmark": sw.version()}
        return self._opening(text, info)

    def state_key(self) -> str | None:
        """Room name + digest of the room's description and the inventory (None before reset)."""
        if not self._info:
            return None
        look, inventory = self._info.get("look", ""), self._info.get("inv", "")
        room = _ROOM.search(look)
        digest = hashlib.sha1(f"{look}\n{inventory}".encode()).hexdigest()[:16]
        return f"{room.group(1) if room else '?'}|{digest}"

    def render(self) -> str:
        """The task, the current room, the inventory and the score, as text."""
        if not self._info:
            return "ScienceWorld: not reset yet"
        return "\n\n".join([self._info.get("taskDesc", "").strip(),
                            self._info.get("look", "").strip(),
                            self._info.get("inv", "").strip(),
                            f"Score: {self._info.get('score', 0)}"])

    # -- helpers ---------------------------------------------------------------------
    @property
    def _observation(self) -> str:
        return self._info.get("look", "")

    async def _load(self, task: str, variation: int, gold: bool) -> None:
        engine = await self._ensure_engine()
        try:
            await self._call(engine.load, task, variation, self.simplifications, gold)
        except ValueError as exc:  # the package's own check of the simplification string
            raise ConfigError(f"ScienceWorld rejected the episode settings: {exc}") from None
        _, self._info = await self._call(engine.reset)
        self._commands, self._gold = [], None

    async def _load_gold(self) -> list[str]:
        assert self._episode is not None  # set by reset, which expert_action requires
        await self._load(*self._episode, gold=True)
        return list(await self._call(self._engine.get_gold_action_sequence))

    def _valid(self, observation: str) -> bool:
        return observation.strip() != UNKNOWN_COMMAND

    async def _task_over(self) -> bool:
        # The package's done = the engine's completion, a negative score, or its step limit.
        return self._info.get("score", 0) < 0 or bool(
            await self._call(self._engine.server.getCompleted))

    def _step_info(self, *, valid: bool) -> dict[str, Any]:
        # Success is the benchmark's full score; reset and every invalid turn come before it.
        score = self._info.get("score", 0)
        info: dict[str, Any] = {"valid": valid, "success": score >= 100, "score": score,
                                "outcome_reward": float(max(score, 0)),
                                "moves": self._info.get("moves", 0), "benchmark": sw.version()}
        if self.valid_actions_in_info:
            # Sorted: the engine lists them in hash order, which depends on how many objects
            # the shared JVM has made before, not on the episode.
            info["valid_actions"] = sorted(self._info.get("valid", ()))
        return info


def resolve_task(task: str) -> str:
    """The benchmark's task name for a name, id or paper name; ConfigError when unknown."""
    sw.package()
    from scienceworld.utils import infer_task

    names = sw.task_names()
    name = infer_task(str(task))
    if name not in names:
        raise ConfigError(f"unknown ScienceWorld task {task!r}; expected one of {names}"
                          f"{did_you_mean(str(task), names)}")
    return name


def _split_variations(engine: Any, task: str, split: str) -> list[int]:
    """The benchmark's variation ids of ``task`` in ``split`` (queried once per process)."""
    if task not in _VARIATION_SPLITS:
        engine.load(task, 0, "", False)  # the split lists are read from a loaded task
        _VARIATION_SPLITS[task] = {"train": list(engine.get_variations_train()),
                                   "dev": list(engine.get_variations_dev()),
                                   "test": list(engine.get_variations_test())}
    return _VARIATION_SPLITS[task][split]

