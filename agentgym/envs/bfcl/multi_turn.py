"""BFCL multi-turn categories: live API instances, user turns in order, BFCL's checkers.

Registered as ``bfcl/MultiTurn-v0`` (``category=`` picks ``multi_turn_base``,
``multi_turn_miss_func``, ``multi_turn_miss_param`` or ``multi_turn_long_context``). An
episode follows BFCL's function-calling inference loop:

- reset instantiates the entry's API classes (file system, messaging, trading, travel, ...)
  from its ``initial_config`` through BFCL's executor, and shows the first user turn;
- a reply with tool calls runs them, in order, against the live instances; each result (or
  BFCL's ``Error during execution: ...`` text) comes back as a tool message;
- a reply without tool calls ends the current user turn; the next turn's user message
  follows. In ``multi_turn_miss_func`` the held-out functions join the tools at the turn BFCL
  names, with BFCL's message "I have updated some more functions you can choose from. What
  about now?";
- more than 20 tool-calling replies in one turn end the episode as BFCL's force-quit does:
  in an earlier turn the entry fails (reward 0.0, ``info["bfcl"]["error_type"] =
  "multi_turn:force_terminated"``); in the last turn BFCL's checker still scores the calls
  made, as BFCL's eval runner does when the model's turns are all there.

At the end of each user turn BFCL's ``multi_turn_checker`` (state and response checks) runs
on the turns so far; its verdict is ``info["turn_passed"]`` and the list so far
``info["turn_results"]``. The reward, on the last step, is the checker's verdict on all turns
(1.0 or 0.0); earlier steps are not scored (``None``).

Calls are executed the way BFCL executes them, with two guards: a call whose name is no
method of the entry's API classes, whose parameter names are not identifiers, or whose
values are not JSON data is answered with an error and not executed (BFCL would ``eval`` it;
these guards keep Python builtins out of reach); so is a call whose cost an argument's value
drives past a bound (``logarithm`` or ``square_root`` above 10,000 digits, an exact integer
``power`` above 2**20 bits, ``round_number`` of an integer to more than 10,000 places left of
the point; see :func:`.calls.too_costly`). BFCL's code runs in a worker thread, so a step
timeout can fire while it works, and it cannot change process-wide numeric precision (see
:mod:`.scoring`). A call to a
class method that is not among the current tools (a held-out function before its turn) runs,
as in BFCL, but is marked ``valid=False``, as are wrong-type arguments and tool-call markup
that does not parse. A reply without a call is an action (``prose_is_action``): it ends the
user turn, as BFCL's protocol has it, and is ``valid=True``.

``state_key``: a hash of the turn index and the instances' public state (what BFCL's state
checker compares), so revisited states share a key within a group.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal

from agentgym.envs.bfcl import scoring
from agentgym.envs.bfcl.base import BFCLBaseEnv
from agentgym.envs.bfcl.calls import (
    call_problems,
    is_safe,
    question_messages,
    read_calls,
    too_costly,
)
from agentgym.types import Message, StepResult, ToolCall

MAX_STEPS_PER_TURN = 20
"""BFCL's ``MAXIMUM_STEP_LIMIT``: more tool-calling replies than this in a turn fail the entry."""
ADDED_FUNCTIONS_PROMPT = ("I have updated some more functions you can choose from. "
                          "What about now?")
"""BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``."""


class BFCLMultiTurnEnv(BFCLBaseEnv):
    """One BFCL multi-turn category; see the module docstring.

    Args:
        category: ``multi_turn_base``, ``multi_turn_miss_func``, ``multi_turn_miss_param`` or
            ``multi_turn_long_context``.
        split: ``"all"`` (every entry, file order), or the fixed ``"train"``/``"test"``
            partition by id hash.

    Raises:
        ConfigError: Unknown category (with the closest names), a single-turn category, or
            an unknown split.
    """

    prose_is_action = True
    """A reply without a call ends the user turn (BFCL's protocol), not a mistake."""

    def __init__(self, category: str = "multi_turn_base",
                 split: Literal["all", "train", "test"] = "all") -> None:
        super().__init__(category, split, multi_turn=True)
        self._executor: scoring.Executor | None = None
        self._turn = 0
        self._steps_in_turn = 0
        self._turns: list[list[list[str]]] = []  # per turn, per step: executed call strings
        self._results: list[bool] = []
        self._expert_sent = False
        self._final = scoring.Verdict(False)

    # -- episode -------------------------------------------------------------------------
    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[list[Message], dict[str, Any]]:
        task = self._pick_task(seed, options)
        self._drop_executor()
        scoring.bfcl()  # imported here, once, not from concurrent worker threads
        self._executor = await asyncio.to_thread(scoring.Executor, task)
        self._functions = list(task.entry["function"])
        self.tools = scoring.tool_specs(self._functions)
        self._turn, self._steps_in_turn, self._turns, self._results = 0, 0, [[]], []
        self._expert_sent = False
        return self._turn_messages(0), {**self._info(), "turns": self.n_turns}

    @property
    def n_turns(self) -> int:
        """Number of user turns in the current entry."""
        return len(self.task.entry["question"]) if self.task is not None else 0

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "turn": self._turn}

    def _turn_messages(self, turn: int) -> list[Message]:
        """The user messages of ``turn``, adding held-out functions first where BFCL does."""
        assert self.task is not None
        held_out = self.task.entry.get("missed_function", {}).get(str(turn))
        if held_out:
            self._functions.extend(held_out)
            self.tools = scoring.tool_specs(self._functions)
            return [Message("user", ADDED_FUNCTIONS_PROMPT)]
        return question_messages(self.task.entry["question"][turn])

    def state_key(self) -> str | None:
        """Hash of the turn index and the API instances' public state."""
        if self._executor is None:
            return None
        state = json.dumps([self._turn, self._executor.state()], sort_keys=True, default=str)
        return hashlib.sha1(state.encode()).hexdigest()[:16]

    async def _step(self, action: Message) -> StepResult:
        assert self.task is not None and self._executor is not None
        calls, errors = read_calls(action)
        if not calls:  # BFCL: no decodable call ends the turn
            return await self._end_turn(errors[0] if errors else None)
        tools = {t.name: t for t in self.tools}
        messages, runnable, problems = [], [], []
        for call in calls:
            problem = call_problems(call, tools)
            name = str(call.name)
            refusal = self._refusal(name, call.arguments, problem)
            if refusal is not None:
                text = f"Error during execution: {refusal}"
                messages.append(Message("tool", text, tool_call_id=call.id, name=name))
                problems.append(problem or text)
                continue
            if problem:
                problems.append(problem)
            runnable.append((call, scoring.call_string(name, call.arguments)))
        results = (await asyncio.to_thread(self._executor.run, [s for _, s in runnable])
                   if runnable else [])
        by_id = {c.id: r for (c, _), r in zip(runnable, results, strict=True)}
        executed = [s for _, s in runnable]
        if executed:
            self._turns[-1].append(executed)
        # answer every call in the order the model made them
        refused = {m.tool_call_id: m for m in messages}
        observation = [refused.get(c.id) or Message("tool", str(by_id.get(c.id, "")),
                                                    tool_call_id=c.id, name=str(c.name))
                       for c in calls]
        if errors:
            observation.append(Message("user", "error: " + "; ".join(errors)))
            problems += list(errors)
        self._steps_in_turn += 1
        info = {**self._info(), "valid": not problems, "executed": executed}
        if problems:
            info["problems"] = problems[:3]
        if self._steps_in_turn > MAX_STEPS_PER_TURN:
            return await self._force_quit(observation, info)
        return StepResult(tuple(observation), None, info=info)

    async def _force_quit(self, observation: list[Message], info: dict[str, Any]) -> StepResult:
        """BFCL's force-quit after too many steps in a turn.

        BFCL's inference loop stops the entry there. Its eval runner fails an entry whose
        model turns are fewer than its turns (``multi_turn:force_terminated``); when the
        quit happens in the last turn, every turn is there and the checker scores them.
        """
        if self._turn + 1 < self.n_turns:
            verdict = scoring.Verdict(False, "multi_turn:force_terminated",
                                      f"more than {MAX_STEPS_PER_TURN} steps in turn "
                                      f"{self._turn}")
            self._results.append(False)
        else:
            await self._check()
            verdict = self._final
        return StepResult(tuple(observation), float(verdict.passed), terminated=True,
                          info={**info, "success": verdict.passed, "bfcl": verdict.to_info(),
                                "force_quit": True, "turn_results": list(self._results)})

    def _refusal(self, name: str, arguments: Any, problem: str | None) -> str | None:
        """Why a call is not handed to BFCL's executor (see the module docstring), or None."""
        assert self._executor is not None
        if name not in self._executor.methods:
            return f"name {name!r} is not defined"
        if not is_safe(arguments):
            return problem or "parameter names must be identifiers and values plain JSON"
        return too_costly(name, arguments)

    async def _end_turn(self, parse_error: str | None) -> StepResult:
        """End the user turn; a reply whose call markup did not parse is still a mistake."""
        assert self._executor is not None
        passed = await self._check()
        info = {**self._info(), "valid": parse_error is None, "turn_end": True,
                "turn_passed": passed, "turn_results": list(self._results)}
        if parse_error is not None:
            info["problems"] = [parse_error]
        self._turn += 1
        self._steps_in_turn, self._expert_sent = 0, False
        if self._turn >= self.n_turns:
            verdict = self._final
            return StepResult((Message("user", "The conversation is over."),),
                              float(verdict.passed), terminated=True,
                              info={**info, "turn": self._turn - 1, "success": verdict.passed,
                                    "bfcl": verdict.to_info()})
        self._turns.append([])
        return StepResult(tuple(self._turn_messages(self._turn)), None, info=info)

    async def _check(self) -> bool:
        """BFCL's checker on the turns so far (once a turn fails, every later check fails)."""
        assert self._executor is not None
        if self._results and not self._results[-1]:
            self._results.append(False)
            return False
        self._final = await asyncio.to_thread(self._executor.check, self._turns)
        self._results.append(self._final.passed)
        return self._final.passed

    def ground_truth_calls(self) -> list[list[ToolCall]]:
        """BFCL's ground truth of the current entry: per turn, its calls as tool calls."""
        assert self.task is not None and self._executor is not None, "reset() first"
        return [[self._executor.gold_call(c, f"call_{i}") for i, c in enumerate(turn)]
                for turn in self.task.ground_truth]

    def expert_action(self) -> Message:
        """BFCL's ground-truth calls of the current turn, then a reply that ends the turn."""
        assert self.task is not None and self._executor is not None, "reset() first"
        gold = self.task.ground_truth[self._turn]
        if self._expert_sent or not gold:
            self._expert_sent = False
            return Message("assistant", "Done." if gold else
                           "I cannot do that with the functions I have.")
        self._expert_sent = True
        return Message("assistant", "", tool_calls=tuple(self.ground_truth_calls()[self._turn]))

    def _drop_executor(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    async def _close(self) -> None:
        self._drop_executor()

