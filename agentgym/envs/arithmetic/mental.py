"""Mental arithmetic: answer a small sum in words, with a second try after a miss.

No tools: the model replies in plain text and the last number it writes is its answer
(``"16 + 9 is 25."`` answers 25). A correct first answer scores 1.0 and ends the episode; a
wrong one gets "not right, try again" and, on the second try, a correct answer scores 0.5.
Two misses score 0.0. A reply with no number is an invalid action (``valid=False``).

The env is small on purpose: short prompts and short answers make it the one a 135M model
can learn on a laptop CPU in minutes (``examples/train_mental_math.yaml``). Operands are
drawn from ``[low, high]``; ``ops`` picks the operators. Train and test splits use disjoint
random streams.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from agentgym.env import BaseEnv
from agentgym.errors import ConfigError
from agentgym.types import Message, StepResult

_NUMBER = re.compile(r"-?\d+")


def _canonical(number: str) -> str:
    """An integer literal as ``str(int(number))`` would write it, for any length."""
    sign, digits = ("-", number[1:]) if number.startswith("-") else ("", number)
    digits = digits.lstrip("0") or "0"
    return "0" if digits == "0" else sign + digits
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
SPLITS = ("train", "test")


class MentalMathEnv(BaseEnv):
    """A sum to answer in plain text; see the module docstring.

    Args:
        split: ``"train"`` or ``"test"`` task stream.
        low: Smallest operand.
        high: Largest operand.
        ops: Operators to draw from, a string over ``+-*``.
        attempts: Answers allowed (1 or 2).
    """

    def __init__(self, split: Literal["train", "test"] = "train", low: int = 2, high: int = 30,
                 ops: str = "+", attempts: int = 2) -> None:
        super().__init__()
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
            raise ConfigError(f"need integers 0 <= low <= high, got low={low!r}, high={high!r}")
        if not ops or set(ops) - set(_OPS):
            raise ConfigError(f"ops must be a non-empty string over '+-*', got {ops!r}")
        if attempts not in (1, 2):
            raise ConfigError(f"attempts must be 1 or 2, got {attempts!r}")
        self.split, self.low, self.high, self.ops, self.attempts = split, low, high, ops, attempts
        self.question, self.answer, self.misses, self.task_id = "", 0, 0, ""

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[Sequence[Message], dict[str, Any]]:
        task_seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
        rng = np.random.default_rng([task_seed, SPLITS.index(self.split), 7])
        a, b = (int(x) for x in rng.integers(self.low, self.high + 1, size=2))
        op = self.ops[int(rng.integers(len(self.ops)))]
        self.question, self.answer, self.misses = f"{a} {op} {b}", _OPS[op](a, b), 0
        self.task_id = f"mental-{self.split}-{task_seed}"
        prompt = f"What is {self.question}? Answer with just the number."
        return [Message("user", prompt)], {"task_id": self.task_id}

    async def _step(self, action: Message) -> StepResult:
        numbers = _NUMBER.findall(action.content)
        if not numbers:
            return self._miss("Your reply has no number.", valid=False)
        # Compared as text: int() of a reply's 5,000-digit number would raise (Python's
        # digit limit), and no answer here is that long.
        if _canonical(numbers[-1]) == str(self.answer):
            reward = 1.0 if self.misses == 0 else 0.5
            return StepResult((Message("user", "Correct."),), reward, terminated=True,
                              info={"valid": True, "success": True})
        shown = numbers[-1] if len(numbers[-1]) <= 40 else numbers[-1][:40] + "…"
        return self._miss(f"{shown} is not right.", valid=True)

    def _miss(self, why: str, valid: bool) -> StepResult:
        self.misses += 1
        if self.misses >= self.attempts:
            return StepResult((Message("user", f"{why} The answer was {self.answer}."),), 0.0,
                              terminated=True, info={"valid": valid, "success": False})
        return StepResult((Message("user", f"{why} Try again: what is {self.question}?"),), 0.0,
                          info={"valid": valid})

    def state_key(self) -> str | None:
        """The question and how many answers missed."""
        return f"{self.task_id}|misses={self.misses}" if self.task_id else None

    def expert_action(self) -> Message:
        """The right answer."""
        return Message("assistant", f"{self.question} = {self.answer}")
