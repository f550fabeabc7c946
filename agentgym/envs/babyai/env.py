"""BabyAI as a text env: minigrid's own levels, missions, rewards and bot, in words.

Each episode is one minigrid BabyAI level built by minigrid from the seed. The model reads
the mission and a language description of its egocentric 7x7 view (see
:mod:`.describe`) and answers with one action from a fixed vocabulary:
``turn left``, ``turn right``, ``go forward``, ``pick up``, ``drop``, ``toggle``. It may
write the phrase as its whole reply (``go forward``), inside ``<action>...</action>``, or
call the tool of the same name (``turn_left``, ...; the tools make the random policy and
tool-calling models work unchanged).

Reward and termination are minigrid's: when the mission is accomplished the episode
terminates with reward ``1 - 0.9 * steps / max_steps``; otherwise the reward is 0. A reply
that names no action (or several) is an agent mistake: ``valid=False``, the world does not
move, but the turn still counts toward the level's step budget, so the episode truncates
after ``max_steps`` turns of any kind.

Info keys on every step: ``valid``, ``success``, ``action`` (the phrase played or None),
``benchmark`` (``"minigrid <version>"``);
the reset info has ``task_id``, ``level``, ``mission`` and ``minigrid_version``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, cast

from agentgym.env import BaseEnv
from agentgym.errors import ConfigError, MissingExtraError, did_you_mean
from agentgym.parsing import parse_tool_calls
from agentgym.tools import readable_call, tool
from agentgym.types import Message, StepResult, ToolCall

from .describe import describe_view
from .levels import LEVELS
from .solvable import unopenable_doors

if TYPE_CHECKING:
    from minigrid.minigrid_env import MiniGridEnv

_MAX_PLAN = 200
"""Subgoals the bot may stack up; its plans hold a handful, so more means it is looping."""


class _BotLooping(Exception):
    pass


class _BoundedPlan(list):
    """The bot's subgoal stack, cut off where it would grow without end."""

    def append(self, item: Any) -> None:
        if len(self) >= _MAX_PLAN:
            raise _BotLooping
        super().append(item)

ACTIONS = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
"""The action vocabulary, in minigrid's action order (left, right, forward, pickup, drop,
toggle); minigrid's ``done`` is left out because BabyAI levels never need it."""
_ALIASES = {"left": 0, "right": 1, "forward": 2, "move forward": 2, "pickup": 3,
            "pick": 3, "open": 5}
_DIRECTIONS = ("east", "south", "west", "north")
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)

INSTRUCTIONS = """\
You are an agent in a grid world of rooms, doors and objects. Carry out the mission.
Each turn you see what is in front of you and to your sides (you do not see through walls \
or closed doors). Reply with exactly one action: turn left, turn right, go forward, pick up, \
drop or toggle (toggle opens and closes doors; a locked door needs the key of its colour). \
For example: <action>go forward</action>"""


def _make_tool(name: str, doc: str) -> Any:
    def act() -> str:
        return name
    act.__name__ = name.replace(" ", "_")
    act.__doc__ = doc
    return tool(act)


_TOOLS = [_make_tool(a, d) for a, d in zip(ACTIONS, (
    "Turn 90 degrees to the left.", "Turn 90 degrees to the right.",
    "Move one cell forward.", "Pick up the object in front of you.",
    "Drop the object you carry in front of you.",
    "Open or close the door (or box) in front of you."), strict=True)]


def _phrase(text: str) -> int | None:
    words = " ".join(re.sub(r"[^a-z ]", " ", text.lower().replace("_", " ")).split())
    if words in ACTIONS:
        return ACTIONS.index(words)
    return _ALIASES.get(words)


def read_action(action: Message) -> tuple[int | None, str | None, str]:
    """The action index a reply names, the tool-call id it came in (if any), and an error.

    Returns:
        ``(index, call_id, "")`` for a readable action, ``(None, call_id, why)`` otherwise.
    """
    tagged = _ACTION_TAG.findall(action.content)
    if len(tagged) == 1 and not action.tool_calls and _phrase(tagged[0]) is not None:
        return _phrase(tagged[0]), None, ""  # <action>turn left</action>
    calls = action.tool_calls or parse_tool_calls(action.content).calls
    if calls:
        call = calls[0]
        call_id = readable_call(call).id  # the id the reply echoes, as text
        if len(calls) > 1:
            return None, call_id, f"one action per turn, got {len(calls)} calls"
        problem = call.problem()  # a user's agent can build any call: answered, never raised
        if problem is not None:
            return None, call_id, problem
        index = _phrase(call.name)
        if index is None:
            names = [a.replace(" ", "_") for a in ACTIONS]
            return None, call_id, (f"unknown action {call.name!r}"
                                   f"{did_you_mean(call.name, names) or ''}")
        if call.arguments:
            return None, call_id, f"{call.name} takes no arguments, got {dict(call.arguments)}"
        return index, call_id, ""
    index = _phrase(action.content)
    if index is None:
        return None, None, "no action found in the reply"
    return index, None, ""


class BabyAIEnv(BaseEnv):
    """One BabyAI level as text; see the module docstring.

    Args:
        level: A level name from :data:`~agentgym.envs.babyai.levels.LEVELS` (``"GoToObj"``).

    Raises:
        ConfigError: an unknown level (with the closest names).
        MissingExtraError: minigrid is not installed.

    Attributes:
        minigrid: The underlying minigrid level (``gymnasium.make(...).unwrapped``).
    """

    def __init__(self, level: str = "GoToObj") -> None:
        super().__init__()
        if level not in LEVELS:
            raise ConfigError(f"expected level to be one of {sorted(LEVELS)}, got {level!r}"
                              f"{did_you_mean(str(level), LEVELS)}; fix: pass level='GoToObj'")
        try:
            import gymnasium
            import minigrid  # noqa: F401  (importing it registers the BabyAI ids)
        except ImportError as exc:
            raise MissingExtraError("minigrid", "games", "the BabyAI envs") from exc
        self.level = level
        self.benchmark = f"minigrid {version('minigrid')}"
        self.tools = tuple(t.spec for t in _TOOLS)
        # every id in LEVELS is a BabyAI level, a MiniGridEnv
        self.minigrid = cast("MiniGridEnv", gymnasium.make(LEVELS[level]).unwrapped)
        self._bot: Any = None
        self._last_action: int | None = None
        self.task_id = ""

    @property
    def max_steps(self) -> int:
        """The level's step budget (minigrid's ``max_steps``).

        minigrid sets it at every reset from the mission (BossLevel: 1,152 for a mission of
        two navigations in its 3x3 rooms of 8x8), so read it after ``reset``.
        """
        return int(self.minigrid.max_steps)

    @property
    def max_turns(self) -> int:
        """The episode's turn limit: the level's ``max_steps``, the benchmark's own.

        The rollout engine reads it as the episode's step cap (``RolloutConfig.max_steps``
        None), so an episode runs until minigrid ends it; a shorter cap for training is the
        registry's ``max_turns`` (or the rollout's ``max_steps``).
        """
        return self.max_steps

    @property
    def mission(self) -> str:
        """The mission of the current episode."""
        return str(self.minigrid.mission)

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[list[Message], dict[str, Any]]:
        if options:
            raise ConfigError(f"BabyAIEnv.reset takes no options, got {sorted(options)}; "
                              "fix: choose the episode with seed=")
        if seed is None:  # draw one, so task_id names an episode reset(seed=...) rebuilds
            seed = int(self.np_random.integers(2**31 - 1))
        obs, _ = self.minigrid.reset(seed=seed)
        self._bot, self._last_action = None, None
        self.task_id = f"babyai-{self.level}-seed{seed}"
        text = f"{INSTRUCTIONS}\n\nMission: {self.mission}\n{self._view(obs)}"
        info = {"task_id": self.task_id, "level": self.level, "mission": self.mission,
                "minigrid_version": version("minigrid")}
        return [Message("user", text)], info

    async def _step(self, action: Message) -> StepResult:
        index, call_id, error = read_action(action)
        out_of_turns = self.turn + 1 >= self.max_steps
        if index is None:
            self._bot = None  # the bot assumes its suggestion was played; rebuild it on demand
            text = (f"error: {error}. Reply with one of: {', '.join(ACTIONS)}. Nothing moved.\n"
                    f"{self._view(self.minigrid.gen_obs())}")
            return StepResult((self._reply(text, call_id, None),), 0.0, terminated=False,
                              truncated=out_of_turns,
                              info={"benchmark": self.benchmark, "valid": False,
                                    "success": False, "action": None})
        obs, reward, terminated, truncated, _ = self.minigrid.step(index)
        self._last_action = index
        success = bool(terminated and float(reward) > 0)
        text = f"You did: {ACTIONS[index]}.\n{self._view(obs)}"
        if success:
            text += "\nMission accomplished!"
        reply = self._reply(text, call_id, ACTIONS[index])
        return StepResult((reply,), float(reward), terminated=bool(terminated),
                          truncated=bool(truncated or out_of_turns) and not terminated,
                          info={"benchmark": self.benchmark, "valid": True,
                                "success": success, "action": ACTIONS[index]})

    def state_key(self) -> str | None:
        """Agent position and heading, the carried object, and a digest of the full grid."""
        if not self.task_id:
            return None
        env = self.minigrid
        grid = hashlib.sha1(env.grid.encode().tobytes()).hexdigest()[:12]
        carrying = f"{env.carrying.color} {env.carrying.type}" if env.carrying else "nothing"
        x, y = (int(v) for v in env.agent_pos)
        return (f"{self.task_id}|pos=({x},{y}) facing={_DIRECTIONS[int(env.agent_dir)]} "
                f"carrying={carrying} grid={grid}")

    def render(self) -> str:
        """The full grid as minigrid prints it (two characters a cell; the agent as ``>>``...)."""
        if not self.task_id:
            raise RuntimeError("BabyAIEnv.render() before reset(); call `await env.reset()`")
        return f"Mission: {self.mission}\n{self.minigrid.pprint_grid()}"

    def expert_action(self) -> Message:
        """The next action of minigrid's BabyAI bot, as a tool call.

        Raises:
            RuntimeError: before ``reset``, or when the bot gives up or loops (it then names
                why: on a level generated unsolvable, a locked door whose key is out of reach
                (see :mod:`.solvable`), the bot's plan would grow without end).
        """
        from minigrid.utils.baby_ai_bot import BabyAIBot

        if not self.task_id:
            raise RuntimeError("BabyAIEnv.expert_action() before reset(); call "
                               "`await env.reset(seed=...)` first")
        if self._bot is None:
            self._bot, self._last_action = BabyAIBot(self.minigrid), None
            self._bot.stack = _BoundedPlan(self._bot.stack)
        try:
            index = int(self._bot.replan(self._last_action))
        except _BotLooping:
            self._bot = None
            doors = unopenable_doors(self.minigrid)
            why = (f"the level is unsolvable: the {doors[0][2]} door at {doors[0][:2]} is "
                   "locked and its key is out of reach" if doors else "its plan loops")
            raise RuntimeError(f"BabyAIBot gives up on {self.task_id}: {why}") from None
        self._last_action = None  # the bot assumes its own suggestion is played next
        if index >= len(ACTIONS):
            raise RuntimeError(f"BabyAIBot suggests 'done' on {self.task_id}; the level "
                               "did not end, so the bot is stuck")
        name = ACTIONS[index].replace(" ", "_")
        return Message("assistant", "", tool_calls=(ToolCall("call_0", name, {}),))

    def _view(self, obs: Mapping[str, Any]) -> str:
        seen = describe_view(obs["image"], self.minigrid.carrying)
        return "You see: " + ("; ".join(seen) if seen else "nothing but floor") + "."

    @staticmethod
    def _reply(text: str, call_id: str | None, phrase: str | None) -> Message:
        if call_id is None:
            return Message("user", text)
        name = None if phrase is None else phrase.replace(" ", "_")
        return Message("tool", text, tool_call_id=call_id, name=name)
