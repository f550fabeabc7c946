"""CodeMath: number problems solved by writing Python in a persistent, sandboxed interpreter.

Tools: ``python(code)`` runs a cell in the episode's own interpreter
(:class:`agentgym.sandboxes.interpreter.PythonInterpreter`: CPU, memory, time and output
limits, no network where a network namespace can be made), keeping variables across calls;
``final_answer(answer)`` submits the number and ends the episode. Reward: 1.0 for the exact
integer, 0.0 otherwise, on the answer step; earlier steps are not scored (``None``).

A cell that raises, or runs past its time limit, is an agent mistake: the traceback comes
back as the observation with ``valid=False``. An interpreter that cannot start is an
infrastructure fault (``SandboxError``): the episode ends as an ``error`` trajectory.

Tasks: ``split="train"`` and ``split="test"`` use disjoint random streams; the task id names
split and seed. The interpreter starts on the first ``python`` call, so an episode that
never runs code costs no process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentgym.envs.code.tasks import make_problem
from agentgym.errors import ConfigError
from agentgym.sandboxes.base import SandboxError
from agentgym.sandboxes.interpreter import InterpreterLimits, PythonInterpreter
from agentgym.tool_env import Task, ToolEnv
from agentgym.tools import tool
from agentgym.types import ToolCall

SPLITS = ("train", "test")
SYSTEM_PROMPT = ("You solve math problems by writing Python code. Run code with the python "
                 "tool; variables persist between calls. Print the values you need.")
INSTRUCTIONS = (
    "Write a program that computes the answer and run it:\n"
    '<tool_call>{"name": "python", "arguments": {"code": "print(sum(range(10)))"}}'
    "</tool_call>\nWhen the program has printed the answer, submit it:\n"
    '<tool_call>{"name": "final_answer", "arguments": {"answer": 45}}</tool_call>')


class CodeError(Exception):
    """A cell raised or timed out; its text is what the model reads."""


@dataclass
class CodeState:
    """Per-episode state: the task and the episode's own interpreter."""

    task: Task
    interpreter: PythonInterpreter
    outputs: list[str] = field(default_factory=list)

    async def aclose(self) -> None:
        """Kill the interpreter (called by ToolEnv at the next reset and at aclose)."""
        await self.interpreter.aclose()


async def python(code: str, state: CodeState) -> str:
    """Run Python code in a persistent interpreter and return what it printed.

    The value of the last line is shown, as in a notebook. Variables and imports persist
    between calls in the same episode.

    Args:
        code: Python source code, e.g. "print(sum(range(10)))".
        state: The episode's state, passed in by the env (hidden from the model).
    """
    result = await state.interpreter.run(code)
    text = result.render()
    state.outputs.append(text)
    if not result.ok:
        raise CodeError(text)
    return text


class CodeMathEnv(ToolEnv):
    """Number problems with a Python tool; see the module docstring.

    Args:
        split: ``"train"`` or ``"test"`` task stream.
        call_timeout: Wall seconds per ``python`` call.
        memory_mb: Interpreter memory limit.
        cpu_seconds: Interpreter CPU-time limit for the whole episode.
        tasks: Problems from a JSONL, JSON, CSV or Parquet file or a ``datasets.Dataset``
            (rows with ``prompt`` and a numeric ``answer``; :mod:`agentgym.task_data`)
            instead of the generated ones; ``split`` then only names them.
    """

    def __init__(self, split: Literal["train", "test"] = "train", call_timeout: float = 10.0,
                 memory_mb: int = 1024, cpu_seconds: int = 60,
                 tasks: str | os.PathLike[str] | Any = None) -> None:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        self.limits = InterpreterLimits(call_timeout=call_timeout, memory_mb=memory_mb,
                                        cpu_seconds=cpu_seconds)
        # the ToolBox timeout is a backstop: the interpreter's own timeout fires first
        super().__init__(self._task if tasks is None else tasks,
                         [tool(python, timeout=call_timeout + 30.0)],
                         verifier="numeric", system_prompt=SYSTEM_PROMPT,
                         instructions=INSTRUCTIONS,
                         state_factory=self._state, faults=(SandboxError,))

    def _task(self, seed: int) -> Task:
        problem = make_problem(np.random.default_rng([seed, SPLITS.index(self.split), 11]))
        return Task(f"codemath-{self.split}-{seed}", problem.question, problem.answer,
                    solution=(ToolCall("call_0", "python", {"code": problem.program}),))

    def _state(self, task: Task) -> CodeState:
        return CodeState(task, PythonInterpreter(self.limits))
