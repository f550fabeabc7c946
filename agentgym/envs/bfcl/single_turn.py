"""BFCL single-turn categories: one question, one reply, BFCL's verdict.

Registered as ``bfcl/SingleTurn-v0`` (``category=`` picks the BFCL category). The model reads
the entry's question (as BFCL's FC mode sends it: no system prompt of ours) with the entry's
functions as tools, and replies once; the episode ends there. Reward: 1.0 when BFCL counts
the reply as correct, else 0.0:

- AST categories (``simple_python``, ``multiple``, ``parallel``, ``parallel_multiple``,
  ``live_simple``, ``live_multiple``, ``live_parallel``, ``live_parallel_multiple``):
  BFCL's ``ast_checker`` on the calls, as ``[{name: arguments}]``;
- ``irrelevance``, ``live_irrelevance``: correct when the reply holds no call;
- ``live_relevance``: correct when it holds at least one.

A reply without a call is an action here (``prose_is_action``): declining is what BFCL asks
for in the irrelevance categories, so it is ``valid=True`` (and scored 0 where a call was
due). Tool-call markup that does not parse is ``valid=False``; so is a call to an unknown
function, arguments that are not a JSON object, or values of the wrong JSON type for the
tool's schema (enum lists are not enforced: BFCL does not). ``valid`` says whether the reply
was a well-formed action; the reward says whether BFCL accepts it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from agentgym.envs.bfcl import scoring
from agentgym.envs.bfcl.base import BFCLBaseEnv
from agentgym.envs.bfcl.calls import call_problems, question_messages, read_calls
from agentgym.types import Message, StepResult


class BFCLSingleTurnEnv(BFCLBaseEnv):
    """One BFCL single-turn category; see the module docstring.

    Args:
        category: BFCL category name, e.g. ``"simple_python"`` or ``"live_irrelevance"``.
        split: ``"all"`` (every entry, file order, as BFCL scores), or the fixed
            ``"train"``/``"test"`` partition by id hash.

    Raises:
        ConfigError: Unknown category (with the closest names), a multi-turn category, or
            an unknown split.

    Example:
        >>> import asyncio, agentgym
        >>> env = agentgym.make("bfcl/SingleTurn-v0", category="simple_python")
        >>> obs, info = asyncio.run(env.reset(options={"task_id": "simple_python_1"}))
        >>> [t.name for t in env.tools]
        ['math_factorial']
    """

    prose_is_action = True
    """Declining (a reply without a call) is an answer BFCL scores, not a mistake."""

    def __init__(self, category: str = "simple_python",
                 split: Literal["all", "train", "test"] = "all") -> None:
        super().__init__(category, split, multi_turn=False)
        self._answered = False

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[list[Message], dict[str, Any]]:
        task = self._pick_task(seed, options)
        self.tools = scoring.tool_specs(task.entry["function"])
        self._answered = False
        return question_messages(task.entry["question"][0]), self._info()

    def state_key(self) -> str | None:
        """The entry and whether it was answered (a single-turn task has no other state)."""
        if self.task is None:
            return None
        return hashlib.sha1(f"{self.task.id}|{self._answered}".encode()).hexdigest()[:16]

    async def _step(self, action: Message) -> StepResult:
        assert self.task is not None
        calls, errors = read_calls(action)
        tools = {t.name: t for t in self.tools}
        problems = [p for c in calls if (p := call_problems(c, tools))]
        decoded = None if errors or not calls or not all(
            isinstance(c.arguments, Mapping) for c in calls) else [
            {str(c.name): dict(c.arguments)} for c in calls]
        verdict = scoring.score_single(self.task, decoded)
        self._answered = True
        if errors:  # markup that meant a call but does not parse
            problems.insert(0, errors[0])
        lines = [f"BFCL {self.category.label}: {'correct' if verdict.passed else 'incorrect'}"]
        if verdict.error:
            lines.append(f"{verdict.error_type}: {verdict.error[:500]}")
        lines += [f"note: {p}" for p in problems[:3]]
        return StepResult((Message("user", "\n".join(lines)),), float(verdict.passed),
                          terminated=True,
                          info={**self._info(), "valid": not problems,
                                "success": verdict.passed, "bfcl": verdict.to_info()})

    def expert_action(self) -> Message:
        """BFCL's ground truth as the reply (no call in the irrelevance categories)."""
        assert self.task is not None, "reset() first"
        calls = scoring.gold_single(self.task)
        if not calls:
            return Message("assistant", "None of the functions can answer this request.")
        return Message("assistant", "", tool_calls=calls)

