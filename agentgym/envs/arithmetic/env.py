"""Arithmetic tool use: solve a word problem with a calculator, then submit the answer.

Tools: ``calculator(expression)`` evaluates +, -, *, /, //, %, ** and parentheses exactly
(rational arithmetic, so 1/3*3 is 1), and ``answer(value)`` submits the final number and
ends the episode. Reward: 1.0 for the exact answer, 0.0 otherwise, on the ``answer`` step;
steps before it are not scored (reward ``None``). A bad expression or a call of an unknown
tool is an observation with ``valid=False``.

Tasks: ``split="train"`` and ``split="test"`` draw from disjoint random streams, so the same
seed gives different problems in the two splits; the task id names split and seed.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from agentgym.env import BaseEnv
from agentgym.envs.arithmetic.tasks import Problem, make_problem
from agentgym.errors import ConfigError
from agentgym.tools import ToolBox, tool
from agentgym.types import Message, StepResult, ToolCall

SPLITS = ("train", "test")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
        ast.Pow: operator.pow}
_MAX_EXPONENT = 64
_MAX_DIGITS = 4000


def evaluate(expression: str) -> Fraction:
    """Evaluate an arithmetic expression exactly; raises ValueError on anything else."""
    if len(expression) > 500:
        raise ValueError("expression is longer than 500 characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None

    def ev(node: ast.AST) -> Fraction:
        if (isinstance(node, ast.Constant) and isinstance(node.value, int | float)
                and not isinstance(node.value, bool)):  # True is an int, not a number here
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (right.denominator != 1
                                                  or abs(right) > _MAX_EXPONENT):
                raise ValueError(f"exponents must be whole numbers up to {_MAX_EXPONENT}")
            if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
                raise ValueError("division by zero")
            result = Fraction(_OPS[type(node.op)](left, right))
            if len(str(result.numerator)) > _MAX_DIGITS:
                raise ValueError("the result is too large")
            return result
        raise ValueError(f"unsupported syntax {type(node).__name__}; use numbers, + - * / // % "
                         "** and parentheses")

    return ev(tree.body)


def format_number(value: Fraction) -> str:
    """Integers print exactly; other values as a decimal with up to 10 places."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.10f}".rstrip("0").rstrip(".")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "(12 + 3) * 7".
    """
    return format_number(evaluate(expression))


@dataclass
class _Episode:
    problem: Problem
    answered: float | None = None
    results: list[str] = field(default_factory=list)


@tool
def answer(value: float, state: _Episode) -> str:
    """Submit the final answer; this ends the episode.

    Args:
        value: The final number.
        state: The episode, filled in by the ToolBox (hidden from the model).
    """
    state.answered = value
    return "answer recorded"


class ArithmeticEnv(BaseEnv):
    """Multi-step word problems that need a calculator; see the module docstring.

    Args:
        split: ``"train"`` or ``"test"`` task stream.
    """

    def __init__(self, split: Literal["train", "test"] = "train") -> None:
        super().__init__()
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        self.toolbox = ToolBox([calculator, answer])
        self.tools = self.toolbox.specs
        self._episode: _Episode | None = None
        self._task_id = ""

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[Sequence[Message], dict[str, Any]]:
        task_seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
        rng = np.random.default_rng([task_seed, SPLITS.index(self.split)])
        self._episode = _Episode(make_problem(rng))
        self._task_id = f"arithmetic-{self.split}-{task_seed}"
        prompt = (
            f"{self._episode.problem.question}\n\n"
            "Use the calculator tool for every computation, then call the answer tool with "
            "the final number. Call a tool by writing, for example:\n"
            '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 7"}}'
            "</tool_call>"
        )
        return [Message("user", prompt)], {"task_id": self._task_id}

    async def _step(self, action: Message) -> StepResult:
        assert self._episode is not None
        episode = self._episode
        outcome = await self.toolbox.run(action, state=episode)
        for call, value in zip(outcome.calls, outcome.results, strict=False):
            if call.name == "calculator" and value is not None:
                episode.results.append(value)
        if episode.answered is None:
            return StepResult(outcome.messages, None, info={"valid": outcome.valid})
        correct = abs(episode.answered - episode.problem.answer) < 1e-9
        return StepResult(outcome.messages, 1.0 if correct else 0.0, terminated=True,
                          info={"valid": outcome.valid, "success": correct,
                                "expected": episode.problem.answer})

    def state_key(self) -> str | None:
        """The task and the calculator results obtained so far."""
        if self._episode is None:
            return None
        return f"{self._task_id}|{';'.join(self._episode.results)}"

    def expert_action(self) -> Message:
        """The next step of a correct solution (the scripted policy)."""
        assert self._episode is not None
        steps, done = self._episode.problem.steps, len(self._episode.results)
        if done < len(steps):
            call = ToolCall("call_0", "calculator", {"expression": steps[done]})
        else:
            call = ToolCall("call_0", "answer", {"value": self._episode.problem.answer})
        return Message("assistant", "", tool_calls=(call,))
