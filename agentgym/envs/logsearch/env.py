"""LogSearch: trace a failed request through a large set of server logs (long horizon).

The agent gets nine generated log files (``lines_per_file`` lines each, default 400, about
40 tokens a line) and must report the error code of a client's failed checkout by following
its ids from file to file (see :mod:`agentgym.envs.logsearch.logs`). Observations are long:
a page of ``read`` is ``page_lines`` lines (default 15, about 650 tokens) and a broad
``grep`` returns up to ``max_matches`` lines, so with a working context of 1–2k tokens the
context overflows after a page or two: the env for summarization-based context management
(SUPO). A precise ``grep`` path exists (five calls), so the task is solvable in a small
context by an agent that searches well.

Tools: ``list_files()``, ``read(file, page)``, ``grep(file, pattern)`` (plain substring,
case-sensitive) and ``answer(code)``, which ends the episode. Reward 1.0 for the right code,
0.0 for a wrong one, on the ``answer`` step; earlier steps are not scored (``None``). An
unknown file, a page out of range or an empty pattern is an observation with ``valid=False``.

Tasks: ``split="train"`` and ``split="test"`` use disjoint random streams. The state key is
the task plus how many ids of the traced request the agent has seen so far (0–4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentgym.env import BaseEnv
from agentgym.envs.logsearch.logs import LogSet, generate
from agentgym.errors import ConfigError
from agentgym.tools import ToolBox, tool
from agentgym.types import Message, StepResult, ToolCall

SPLITS = ("train", "test")


@dataclass
class _Episode:
    logs: LogSet
    page_lines: int
    max_matches: int
    answered: str | None = None
    seen: str = ""  # every observation so far, to tell which ids the agent has found

    def lines(self, file: str) -> tuple[str, ...]:
        if file not in self.logs.files:
            raise ValueError(f"no file {file!r}; files: {', '.join(self.logs.files)}")
        return self.logs.files[file]


@tool
def list_files(state: _Episode) -> str:
    """List the log files and their sizes.

    Args:
        state: The episode (hidden from the model).
    """
    pages = {f: -(-len(lines) // state.page_lines) for f, lines in state.logs.files.items()}
    return "\n".join(f"{f}: {len(state.logs.files[f])} lines, {pages[f]} pages"
                     for f in state.logs.files)


@tool
def read(file: str, page: int, state: _Episode) -> str:
    """Read one page of a log file, with line numbers.

    Args:
        file: File name, e.g. "gateway.log".
        page: Page number, from 1.
        state: The episode (hidden from the model).
    """
    lines = state.lines(file)
    last = -(-len(lines) // state.page_lines)
    if not 1 <= page <= last:
        raise ValueError(f"page must be between 1 and {last} for {file}, got {page}")
    start = (page - 1) * state.page_lines
    body = "\n".join(f"{start + i + 1}: {line}" for i, line in
                     enumerate(lines[start:start + state.page_lines]))
    return f"{file} page {page}/{last}\n{body}"


@tool
def grep(file: str, pattern: str, state: _Episode) -> str:
    """Lines of a log file that contain a text (case-sensitive), with line numbers.

    Args:
        file: File name, e.g. "orders.log".
        pattern: Text to look for, e.g. "req=4f1c9a".
        state: The episode (hidden from the model).
    """
    if not pattern.strip():
        raise ValueError("pattern is empty; give a text to look for, e.g. an id")
    found = [f"{n + 1}: {line}" for n, line in enumerate(state.lines(file)) if pattern in line]
    if not found:
        return f"no line of {file} contains {pattern!r}"
    more = len(found) - state.max_matches
    tail = f"\n... {more} more matches; use a more specific pattern" if more > 0 else ""
    return "\n".join(found[:state.max_matches]) + tail


@tool
def answer(code: str, state: _Episode) -> str:
    """Submit the error code of the traced request; this ends the episode.

    Args:
        code: The error code, e.g. "E-1234".
        state: The episode (hidden from the model).
    """
    state.answered = code.strip()
    return "answer recorded"


class LogSearchEnv(BaseEnv):
    """Trace a failed checkout through server logs; see the module docstring.

    Args:
        split: ``"train"`` or ``"test"`` task stream.
        lines_per_file: Lines in each of the nine log files (>= 20).
        page_lines: Lines per ``read`` page.
        max_matches: Most lines one ``grep`` returns.
        decoys: Other traced-looking requests (with other error codes) in the logs.
    """

    def __init__(self, split: Literal["train", "test"] = "train", lines_per_file: int = 400,
                 page_lines: int = 15, max_matches: int = 20, decoys: int = 40) -> None:
        super().__init__()
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        for name, value, low in [("lines_per_file", lines_per_file, 20),
                                 ("page_lines", page_lines, 1), ("max_matches", max_matches, 1),
                                 ("decoys", decoys, 0)]:
            if not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")
        if decoys + 1 > lines_per_file // 2:
            raise ConfigError(f"decoys={decoys} needs lines_per_file >= {2 * (decoys + 1)}, "
                              f"got {lines_per_file}")
        self.split, self.lines_per_file, self.decoys = split, lines_per_file, decoys
        self.page_lines, self.max_matches = page_lines, max_matches
        self.toolbox = ToolBox([list_files, read, grep, answer], max_output_chars=16_000)
        self.tools = self.toolbox.specs
        self._episode: _Episode | None = None
        self._task_id = ""

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[Sequence[Message], dict[str, Any]]:
        task_seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
        rng = np.random.default_rng([task_seed, SPLITS.index(self.split), 7])
        logs = generate(rng, self.lines_per_file, self.decoys)
        self._episode = _Episode(logs, self.page_lines, self.max_matches)
        self._task_id = f"logsearch-{self.split}-{task_seed}"
        prompt = (
            f"A checkout request from client {logs.target.ip} failed. Trace it through the "
            "server logs: gateway.log gives its request id (req=...), orders.log links that "
            "req to an order (order=...), payments.log links the order to a job and the "
            "worker that ran it (job=..., worker=...), and that worker's log shows the job "
            "failing with an error code (code=E-....). Many other requests look alike: follow "
            "the ids exactly. Tools: list_files, read (a page of a file), grep (lines with a "
            "text) and answer (submit the code). Call a tool by writing, for example:\n"
            '<tool_call>{"name": "grep", "arguments": {"file": "gateway.log", "pattern": '
            '"client=10.0.0.1"}}</tool_call>')
        return [Message("user", prompt)], {"task_id": self._task_id}

    async def _step(self, action: Message) -> StepResult:
        assert self._episode is not None
        episode = self._episode
        outcome = await self.toolbox.run(action, state=episode)
        episode.seen += "\n".join(m.content for m in outcome.messages)
        if episode.answered is None:
            return StepResult(outcome.messages, None, info={"valid": outcome.valid})
        correct = episode.answered == episode.logs.target.code
        return StepResult(outcome.messages, 1.0 if correct else 0.0, terminated=True,
                          info={"valid": outcome.valid, "success": correct,
                                "expected": episode.logs.target.code})

    def found(self) -> int:
        """How many ids of the traced request (req, order, job, code) were observed, in order."""
        if self._episode is None:
            return 0
        t, seen = self._episode.logs.target, self._episode.seen
        needles = [f"req={t.req}", f"order={t.order}", f"job={t.job}", f"code={t.code}"]
        return next((i for i, n in enumerate(needles) if n not in seen), len(needles))

    def state_key(self) -> str | None:
        """The task and how far along the trace the agent's observations reached."""
        return None if self._episode is None else f"{self._task_id}|{self.found()}"

    def expert_action(self) -> Message:
        """The next call of the precise grep path (the scripted policy; it replans)."""
        assert self._episode is not None
        t = self._episode.logs.target
        file, pattern = [("gateway.log", f"client={t.ip} "), ("orders.log", f"req={t.req}"),
                         ("payments.log", f"order={t.order} "), (f"{t.worker}.log",
                                                                 f"job={t.job}"), (None, None)
                         ][self.found()]
        call = ToolCall("call_0", "grep", {"file": file, "pattern": pattern}) if file else \
            ToolCall("call_0", "answer", {"code": t.code})
        return Message("assistant", "", tool_calls=(call,))

    def reader_plan(self) -> list[Message]:
        """A page-by-page reading of the trace (no grep): the long-context way to solve it.

        For each hop, the pages of that hop's file up to the one holding its needle line,
        then the answer. Used as a scripted long-horizon agent (benchmarks, SUPO tests).
        """
        assert self._episode is not None
        t, logs = self._episode.logs.target, self._episode.logs
        plan = []
        for file, needle in [("gateway.log", f"client={t.ip} "), ("orders.log", f"req={t.req}"),
                             ("payments.log", f"order={t.order} "),
                             (f"{t.worker}.log", f"job={t.job}")]:
            line = next(i for i, x in enumerate(logs.files[file]) if needle in x)
            for page in range(1, line // self.page_lines + 2):
                plan.append(ToolCall("call_0", "read", {"file": file, "page": page}))
        plan.append(ToolCall("call_0", "answer", {"code": t.code}))
        return [Message("assistant", "", tool_calls=(c,)) for c in plan]
