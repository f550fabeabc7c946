"""Sokoban as a text-and-tools env: push every box onto a target.

The model sees the grid as text (verl-agent's symbols: ``#`` wall, ``_`` floor, ``O``
target, ``X`` box, ``√`` box on target, ``P`` player, ``S`` player on target) and moves by
calling four zero-argument tools, ``up``, ``down``, ``left`` and ``right``, in any format
the :class:`~agentgym.tools.ToolBox` reads (``<action>up</action>``, ``<tool_call>`` JSON,
structured tool calls). One reply may hold several calls; they run in order.

Reward (verl-agent's convention, counted per move so a move sequence earns the same return
however it is split into turns):

- ``-0.1`` for every move, including a bump into a wall or an immovable box (a valid no-op);
- ``+1.0`` for each box pushed onto a target, ``-1.0`` for each pushed off one;
- ``+10.0`` when every box is on a target, which ends the episode (``terminated=True``).

A turn is applied all or nothing: when any call in it cannot be parsed or run (unknown
tool, arguments given, too many calls), no move is made, the reward is ``0.0`` and
``info["valid"]`` is False. Moves after the puzzle is solved are not run and cost nothing.
The env never truncates; the registry's ``MaxTurns`` wrapper does (40 turns).

Info keys: ``valid``, ``boxes_on_target``, ``success`` on every step; the reset info has
``task_id``, ``num_boxes`` and ``size``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from agentgym.env import BaseEnv
from agentgym.tools import ToolBox, tool
from agentgym.types import Message, StepResult, ToolCall

from .generator import check_params, generate
from .level import Level, MoveOutcome, move, solve

STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
SOLVED_BONUS = 10.0

INSTRUCTIONS = """\
You are playing Sokoban. Push every box onto a target. You can push a box but not pull \
it, you push one box at a time, and neither you nor a box can pass through a wall.

Symbols: # wall, _ floor, O target, X box, √ box on target, P you, S you on a target.

Move with the tools up, down, left and right (they take no arguments), for example \
<action>up</action>. You may call several in one reply; they run in order. If any call in \
a reply is malformed, none of its moves is made. Walking into a wall, or pushing a box \
into a wall or another box, leaves the board unchanged but still counts as a move.

Reward: -0.1 per move, +1 for each box pushed onto a target, -1 for each box pushed off \
one, +10 when every box is on a target (the game then ends)."""


class _Turn:
    """The board a turn's tool calls act on; the env keeps it only if the whole turn is valid."""

    def __init__(self, level: Level) -> None:
        self.level = level
        self.moves = 0

    def apply(self, direction: str) -> str:
        if self.level.solved:
            return "not run: the puzzle is already solved"
        before = self.level.boxes_on_target
        self.level, outcome = move(self.level, direction)
        self.moves += 1
        return _describe(direction, outcome, self.level.boxes_on_target - before)


def _describe(direction: str, outcome: MoveOutcome, gained: int) -> str:
    if outcome == "blocked":
        return f"{direction}: blocked, nothing moved"
    if outcome == "moved":
        return f"{direction}: moved"
    where = {1: " onto a target", -1: " off a target"}.get(gained, "")
    return f"{direction}: pushed a box{where}"


@tool
def up(state: _Turn) -> str:
    """Move one cell up, pushing the box there (if any) one cell further up."""
    return state.apply("up")


@tool
def down(state: _Turn) -> str:
    """Move one cell down, pushing the box there (if any) one cell further down."""
    return state.apply("down")


@tool
def left(state: _Turn) -> str:
    """Move one cell left, pushing the box there (if any) one cell further left."""
    return state.apply("left")


@tool
def right(state: _Turn) -> str:
    """Move one cell right, pushing the box there (if any) one cell further right."""
    return state.apply("right")


class SokobanEnv(BaseEnv):
    """Procedurally generated Sokoban with a text grid and four move tools.

    Args:
        size: The grid is ``size x size`` including the outer walls, in [5, 32].
        num_boxes: Boxes (and targets), at least 1 and at most a quarter of the interior.
        max_steps_generation: Backward pull attempts when generating a level (more
            attempts scatter the boxes further from their targets).

    Raises:
        ConfigError: an argument is out of range (the message names the fix).

    Example:
        >>> import asyncio
        >>> from agentgym import Message
        >>> from agentgym.envs.sokoban import SokobanEnv, solve
        >>> async def play():
        ...     env = SokobanEnv(size=6, num_boxes=1)
        ...     await env.reset(seed=3)
        ...     for direction in solve(env.level):
        ...         result = await env.step(Message("assistant", f"<action>{direction}</action>"))
        ...     return result.terminated, result.info["success"]
        >>> asyncio.run(play())
        (True, True)
    """

    def __init__(self, size: int = 6, num_boxes: int = 1, max_steps_generation: int = 100,
                 ) -> None:
        super().__init__()
        check_params(size, num_boxes, max_steps_generation)
        self.size = size
        self.num_boxes = num_boxes
        self.max_steps_generation = max_steps_generation
        self._toolbox = ToolBox([up, down, left, right])
        self.tools = self._toolbox.specs
        self._level: Level | None = None
        self._plan: tuple[Level, list[str]] | None = None  # expected level, moves left

    @property
    def level(self) -> Level:
        """The current board (an immutable :class:`Level`); only after ``reset``."""
        if self._level is None:
            raise RuntimeError("SokobanEnv.level is read before reset(); call "
                               "`await env.reset(seed=...)` first")
        return self._level

    def state_key(self) -> str | None:
        """The grid text of the current state (None before the first reset)."""
        return None if self._level is None else self._level.render()

    async def _reset(self, seed: int | None, options: Mapping[str, Any],
                     ) -> tuple[list[Message], dict[str, Any]]:
        unknown = sorted(set(options) - {"level"})
        if unknown:
            raise ValueError(f"expected reset options among ['level'], got {unknown}; fix: pass "
                             "options={'level': grid_text} for a fixed level, or no options")
        self._plan = None
        if "level" in options:  # a hand-written level (tests, curricula)
            self._level = Level.from_text(options["level"])
            digest = hashlib.sha1(self._level.render().encode()).hexdigest()[:12]
            task_id = f"sokoban-custom-{digest}"
        else:
            rng = self.np_random
            if seed is None:  # draw a seed, so task_id names a level reset(seed=...) rebuilds
                seed = int(self.np_random.integers(2**31))
                rng = np.random.default_rng(seed)
            self._level = generate(self.size, self.num_boxes, rng, self.max_steps_generation)
            task_id = f"sokoban-{self.size}x{self.size}-b{self.num_boxes}-seed{seed}"
        text = f"{INSTRUCTIONS}\n\n{self._board_text()}"
        info = {"task_id": task_id, "num_boxes": len(self._level.boxes), "size": self.size}
        return [Message("user", text)], info

    async def _step(self, action: Message) -> StepResult:
        level = self.level
        turn = _Turn(level)
        outcome = await self._toolbox.run(action, state=turn)
        if outcome.valid:
            self._level = turn.level
            gained = turn.level.boxes_on_target - level.boxes_on_target
            reward = STEP_PENALTY * turn.moves + BOX_ON_TARGET_REWARD * gained
            reward += SOLVED_BONUS if turn.level.solved and not level.solved else 0.0
            messages = list(outcome.messages)
            board = self._board_text()
        else:  # the turn is dropped whole, so the board shown is the one before it
            reward = 0.0
            # Calls that ran fine were undone: say so, rather than "moved" or "pushed".
            messages = [_not_applied(m) if i < len(outcome.results) and m.role == "tool"
                        and outcome.results[i] is not None else m
                        for i, m in enumerate(outcome.messages)]
            board = f"No move was made this turn.\n{self._board_text()}"
        if messages and messages[-1].role == "user":  # one user turn, not two in a row
            messages[-1] = Message("user", f"{messages[-1].content}\n\n{board}")
        else:
            messages.append(Message("user", board))
        solved = self.level.solved
        info = {"valid": outcome.valid, "boxes_on_target": self.level.boxes_on_target,
                "success": solved}
        return StepResult(tuple(messages), reward, terminated=solved, truncated=False, info=info)

    def expert_action(self) -> Message:
        """The next move of a shortest solution, as a tool call (the ``scripted`` policy).

        Raises:
            RuntimeError: before ``reset``, after the puzzle is solved, or when the BFS finds
                no solution within its state budget (generated levels always have one).
        """
        level = self.level
        if self._plan is None or self._plan[0] != level:  # the agent left the plan: replan
            moves = solve(level)
            if not moves:
                raise RuntimeError("SokobanEnv.expert_action(): no move to make, the level is "
                                   + ("solved" if moves == [] else "unsolvable or too large"))
            self._plan = (level, moves)
        direction, *rest = self._plan[1]
        self._plan = (move(level, direction)[0], rest) if rest else None
        return Message("assistant", "", tool_calls=(ToolCall("call_0", direction, {}),))

    def _board_text(self) -> str:
        level = self.level
        if level.solved:
            status = "Every box is on a target: puzzle solved!"
        else:
            status = (f"Boxes on target: {level.boxes_on_target} of {len(level.boxes)}. "
                      "Your move.")
        return f"Current board:\n{level.render()}\n{status}"


def _not_applied(message: Message) -> Message:
    return Message("tool", "not applied: another call in this turn was invalid, so this turn "
                   "made no move", tool_call_id=message.tool_call_id, name=message.name)
