"""``ToolEnv``: an env from a task source and a list of Python functions.

The model calls the tools (structured calls, or calls parsed from text as in
:mod:`agentgym.parsing`); each result comes back as a tool message. The episode ends when
the model submits a final answer — the ``final_answer`` tool or an ``<answer>...</answer>``
tag — and the verifier scores it; or when the turn limit truncates it (reward 0.0: the
agent did not answer). Steps before the answer are not scored (reward ``None``).

Errors follow the three kinds of the design:

- agent mistakes (no call, unknown tool, wrong-type or missing arguments, a tool that
  raises or runs past its timeout) are tool/user messages with ``info["valid"] = False``;
- infrastructure faults — a tool raising :class:`ToolFault` (or one of ``faults=``), e.g.
  an MCP server that died — propagate from ``step`` so the rollout engine records an
  ``error`` trajectory;
- caller mistakes (an empty task source, a verifier that returns a string) raise at once.

Per-episode state without globals: a tool parameter named ``state`` receives the episode's
state object, built by ``state_factory(task)`` (default: an :class:`EpisodeState`) at each
reset. When the state has an ``aclose`` method it is awaited at the next reset and at
``aclose``, so a state may own a process (a code interpreter) or a connection.
"""

from __future__ import annotations

import asyncio
import decimal
import functools
import hashlib
import inspect
import os
import queue
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym import verifiers
from agentgym.env import BaseEnv
from agentgym.errors import AgentGymError, ConfigError, SchemaError
from agentgym.task_data import Field, Record, check_fields, is_data_source, read_records
from agentgym.tools import Tool, ToolBox, as_tool
from agentgym.types import Message, StepResult, ToolCall, ToolSpec


class ToolFault(AgentGymError, RuntimeError):
    """The machinery behind a tool failed (a server died, a sandbox could not start).

    Raise it from a tool to end the episode as an ``error`` trajectory instead of showing the
    model an error message: the fault is not the agent's doing and must not be scored.
    """


@dataclass(frozen=True)
class Task:
    """One task.

    Attributes:
        id: Stable id (groups and reports use it).
        prompt: What the model is asked.
        answer: The expected answer for the built-in verifiers (a str, a number, or a list of
            accepted strings); ``None`` when a custom verifier needs none.
        data: Anything else the verifier or the state factory reads.
        solution: Tool calls a correct solver makes before answering (the scripted policy
            replays them, then submits ``answer``).
    """

    id: str
    prompt: str
    answer: Any = None
    data: Mapping[str, Any] = field(default_factory=dict)
    solution: tuple[ToolCall, ...] = ()

    @classmethod
    def from_record(cls, record: Record) -> Task:
        """A task from a data-file row (:mod:`agentgym.task_data`).

        Fields: ``prompt`` (or ``question``) text; optional ``answer`` (text, a number or a
        list of accepted answers), ``id`` (default ``task-<row>``) and ``solution`` (a list of
        ``{"name", "arguments"}`` calls); every other field goes to ``data``.

        Raises:
            SchemaError: A missing or wrongly typed field, naming the row and the field.
        """
        values = check_fields(record, _TASK_FIELDS)
        solution = []
        for i, call in enumerate(values["solution"] or ()):
            if not (isinstance(call, Mapping) and isinstance(call.get("name"), str)
                    and isinstance(call.get("arguments", {}), Mapping)):
                raise SchemaError(f"{record.where}: field 'solution' item {i} must be an "
                                  f'object {{"name": ..., "arguments": {{...}}}}, got {call!r}')
            solution.append(ToolCall(f"call_{i}", call["name"], dict(call.get("arguments", {}))))
        known = {"id", "prompt", "question", "answer", "solution"}
        task_id = values["id"] if values["id"] is not None else f"task-{record.index}"
        return cls(str(task_id), values["prompt"], values["answer"],
                   {k: v for k, v in record.data.items() if k not in known}, tuple(solution))

    @classmethod
    def coerce(cls, obj: Any, index: int) -> Task:
        """A task from a ``Task``, a mapping (``prompt``/``question``, ``answer``, ``id``)."""
        if isinstance(obj, Task):
            return obj
        if isinstance(obj, Mapping):
            prompt = obj.get("prompt", obj.get("question"))
            if not isinstance(prompt, str):
                raise ConfigError(
                    f"task {index} needs a 'prompt' (or 'question') string, got keys {sorted(obj)}"
                )
            known = {"id", "prompt", "question", "answer", "solution"}
            return cls(str(obj.get("id", f"task-{index}")), prompt, obj.get("answer"),
                       {k: v for k, v in obj.items() if k not in known},
                       tuple(obj.get("solution") or ()))
        raise ConfigError(
            f"task {index} must be an agentgym.tool_env.Task or a dict with 'prompt' and "
            f"'answer', got {type(obj).__name__}"
        )


@dataclass
class EpisodeState:
    """The default per-episode state handed to tools that take a ``state`` parameter.

    Attributes:
        task: The episode's task.
        scratch: Free space for the tools of this episode (notes, counters, open handles).
    """

    task: Task
    scratch: dict[str, Any] = field(default_factory=dict)


TaskSource = Sequence[Task | Mapping[str, Any]] | Iterable[Task | Mapping[str, Any]] | \
    Callable[[int], Task | Mapping[str, Any]] | str | os.PathLike[str]
_TASK_FIELDS = (Field("prompt", (str,), aliases=("question",)),
                Field("answer", (str, int, float, list), required=False),
                Field("id", (str, int), required=False),
                Field("solution", (list,), required=False))
_FINAL = "final_answer"


def final_answer(answer: str | float) -> str:
    """Submit the final answer; this ends the episode.

    Args:
        answer: The answer, as short as possible (a number, a name, a word).
    """
    return str(answer)


class ToolEnv(BaseEnv):
    """A tool-use env from tasks, tools and a verifier; see the module docstring.

    Args:
        tasks: A sequence (or iterable) of tasks — ``Task`` objects or dicts with ``prompt``
            and ``answer`` — picked by ``seed % len(tasks)``; a JSONL, JSON, CSV or Parquet
            file of such rows, or a ``datasets.Dataset`` (:mod:`agentgym.task_data`,
            :meth:`Task.from_record`); or a function ``seed -> task``.
        tools: Plain typed, documented functions (sync or async) or :class:`~agentgym.Tool`.
        verifier: ``"exact"``, ``"numeric"``, ``"contains"`` or ``fn(answer, task) -> float``.
        answer_tool: Name of the tool that submits the answer (``None``: no such tool).
        answer_tag: Tag whose text is the answer, e.g. ``<answer>42</answer>`` (``None``: off).
        system_prompt: Optional system message.
        instructions: Text after the task prompt; default: how to submit the answer.
        state_factory: ``task -> state`` (sync or async) for tools with a ``state`` parameter.
        max_turns: Truncate after this many steps (``None``: no limit here; the registry's
            ``max_turns`` also applies).
        timeout: Default seconds per tool call (a :class:`Tool` keeps its own).
        sync_tools: ``"thread"`` runs sync functions in a daemon thread, so a blocking or hanging
            one times out without stalling other episodes; ``"inline"`` calls them on the
            event loop (less overhead, but a hang blocks every episode).
        faults: Exception types a tool may raise that mean an infrastructure fault.
        max_output_chars: Tool results longer than this are cut with a marker.

    Example:
        >>> import asyncio
        >>> from agentgym import Message, ToolCall
        >>> def add(a: int, b: int) -> int:
        ...     '''Add two integers.
        ...
        ...     Args:
        ...         a: The first.
        ...         b: The second.
        ...     '''
        ...     return a + b
        >>> env = ToolEnv([{"prompt": "What is 2 + 3?", "answer": 5}], [add], verifier="numeric")
        >>> async def main():
        ...     await env.reset(seed=0)
        ...     await env.step(Message("assistant", "", (ToolCall("c0", "add", {"a": 2, "b": 3}),)))
        ...     return (await env.step(Message("assistant", "<answer>5</answer>"))).reward
        >>> asyncio.run(main())
        1.0
    """

    def __init__(self, tasks: TaskSource, tools: Iterable[Tool | Callable[..., Any]], *,
                 verifier: str | verifiers.Verifier = "exact",
                 answer_tool: str | None = _FINAL, answer_tag: str | None = "answer",
                 system_prompt: str | None = None, instructions: str | None = None,
                 state_factory: Callable[[Task], Any] | None = None,
                 max_turns: int | None = None, timeout: float = 30.0,
                 sync_tools: Literal["thread", "inline"] = "thread",
                 faults: tuple[type[BaseException], ...] = (),
                 max_output_chars: int = 8_000) -> None:
        super().__init__()
        self._task_fn: Callable[[int], Any] | None = None
        self._tasks: list[Task] = []
        if is_data_source(tasks):  # a JSONL/JSON/CSV/Parquet file or a datasets.Dataset
            self._tasks = [Task.from_record(r) for r in read_records(tasks)]
        elif callable(tasks) and not isinstance(tasks, Sequence):
            self._task_fn = tasks
        else:
            if isinstance(tasks, str | bytes | Mapping) or not isinstance(tasks, Iterable):
                raise ConfigError(
                    "tasks must be a list of tasks (dicts with 'prompt' and 'answer', or Task) "
                    f"or a function seed -> task, got {type(tasks).__name__}"
                )
            self._tasks = [Task.coerce(t, i) for i, t in enumerate(tasks)]
            if not self._tasks:
                raise ConfigError("tasks is empty; give at least one task")
        if sync_tools not in ("thread", "inline"):
            raise ConfigError(f"sync_tools must be 'thread' or 'inline', got {sync_tools!r}")
        if answer_tool is None and answer_tag is None:
            raise ConfigError("set answer_tool or answer_tag, or the episode can never end")
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise ConfigError(f"max_turns must be a positive int or None, got {max_turns!r}")
        self.verifier = verifiers.resolve(verifier)
        self.answer_tool, self.answer_tag = answer_tool, answer_tag
        self.system_prompt, self.instructions = system_prompt, instructions
        self.state_factory, self.max_turns = state_factory, max_turns
        self.faults: tuple[type[BaseException], ...] = (ToolFault, *faults)
        self._tag_re = (re.compile(rf"<{re.escape(answer_tag)}>(.*?)(?:</{re.escape(answer_tag)}>"
                                   r"|\Z)", re.DOTALL) if answer_tag else None)
        self._timeout, self._sync_tools = timeout, sync_tools
        self._max_output_chars = max_output_chars
        self._fault: BaseException | None = None
        self.set_tools(tools)
        self.task: Task | None = None
        self.state: Any = None
        self._history = hashlib.sha1()

    # -- tools -------------------------------------------------------------------------
    def set_tools(self, tools: Iterable[Tool | Callable[..., Any]]) -> None:
        """Replace the tool set (plus the answer tool); envs that discover tools call it."""
        user_tools = [t if isinstance(t, Tool) else Tool(t, as_tool(t).spec, self._timeout)
                      for t in tools]
        if self.answer_tool is not None:
            if any(t.name == self.answer_tool for t in user_tools):
                raise ConfigError(f"a tool is already named {self.answer_tool!r}; pass "
                                  "answer_tool=None to use it as is, or rename it")
            spec = as_tool(final_answer).spec
            user_tools.append(Tool(final_answer, ToolSpec(self.answer_tool, spec.description,
                                                          spec.parameters), self._timeout))
        self.toolbox = ToolBox([self._guard(t, self._sync_tools) for t in user_tools],
                               max_output_chars=self._max_output_chars)
        # Most tools take a few plain scalars: check those directly and leave jsonschema (and
        # its error messages) for everything else; it is most of the per-call overhead.
        self.toolbox.wrap_validators(_FastValidator)
        self.tools: Sequence[ToolSpec] = self.toolbox.specs

    def _guard(self, t: Tool, sync_tools: str) -> Tool:
        """Wrap a tool so infrastructure faults are kept for ``step`` to raise."""
        fn, faults = t.fn, self.faults
        threaded = sync_tools == "thread" and not inspect.iscoroutinefunction(fn)

        @functools.wraps(fn)
        async def guarded(**kwargs: Any) -> Any:
            try:
                if threaded:
                    return await _in_daemon_thread(fn, kwargs)
                value = fn(**kwargs)  # in the ToolBox's fresh decimal context
                return await value if inspect.isawaitable(value) else value
            except faults as exc:
                self._fault = exc
                raise

        guarded.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]  # cached
        return Tool(guarded, t.spec, t.timeout)

    # -- episode -----------------------------------------------------------------------
    def pick_task(self, seed: int | None, options: Mapping[str, Any]) -> Task:
        """The task for this reset: ``options["task_id"]``, else by seed."""
        if self._task_fn is not None:
            task_seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
            return Task.coerce(self._task_fn(task_seed), task_seed)
        if "task_id" in options:
            for t in self._tasks:
                if t.id == options["task_id"]:
                    return t
            raise ConfigError(f"no task with id {options['task_id']!r}; ids look like "
                              f"{[t.id for t in self._tasks[:3]]}")
        index = seed if seed is not None else int(self.np_random.integers(len(self._tasks)))
        return self._tasks[index % len(self._tasks)]

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[Sequence[Message], dict[str, Any]]:
        await self._close_state()
        self.task = self.pick_task(seed, options)
        if self.state_factory is None:
            self.state = EpisodeState(self.task)
        else:
            state = self.state_factory(self.task)
            self.state = await state if inspect.isawaitable(state) else state
        self._fault, self._history = None, hashlib.sha1(self.task.id.encode())
        messages = [Message("system", self.system_prompt)] if self.system_prompt else []
        messages.append(Message("user", f"{self.task.prompt}\n\n{self._instructions()}"))
        return messages, {"task_id": self.task.id}

    def _instructions(self) -> str:
        if self.instructions is not None:
            return self.instructions
        ways = []
        if self.answer_tool:
            ways.append(f'call the {self.answer_tool} tool, e.g. <tool_call>{{"name": '
                        f'"{self.answer_tool}", "arguments": {{"answer": "..."}}}}</tool_call>')
        if self.answer_tag:
            ways.append(f"write <{self.answer_tag}>your answer</{self.answer_tag}>")
        return "Use the tools as needed. When you know the answer, " + " or ".join(ways) + "."

    async def _step(self, action: Message) -> StepResult:
        assert self.task is not None
        tagged = self._tagged_answer(action)
        if tagged is not None and not action.tool_calls and "<tool_call>" not in action.content:
            return await self._finish(tagged, (), valid=True)
        outcome = await self.toolbox.run(action, state=self.state)
        if self._fault is not None:
            fault, self._fault = self._fault, None
            raise fault
        for call, message in zip(outcome.calls, outcome.messages, strict=False):
            args = sorted(call.arguments.items())  # the ToolBox gives well-formed calls
            self._history.update(f"{call.name}\0{args!r}\0{message.content}\0".encode(
                "utf-8", "replace"))
        answer = next((v for c, v in zip(outcome.calls, outcome.results, strict=False)
                       if c.name == self.answer_tool and v is not None), tagged)
        if answer is not None:
            return await self._finish(str(answer), outcome.messages, outcome.valid)
        if self.max_turns is not None and self.turn + 1 >= self.max_turns:
            return StepResult(outcome.messages, 0.0, truncated=True,
                              info={"valid": outcome.valid, "success": False,
                                    "truncated_by": "max_turns"})
        return StepResult(outcome.messages, None, info={"valid": outcome.valid})

    def _tagged_answer(self, action: Message) -> str | None:
        if self._tag_re is None:
            return None
        found = self._tag_re.findall(action.content)
        return found[-1].strip() if found else None

    async def _finish(self, answer: str, messages: Sequence[Message], valid: bool
                      ) -> StepResult:
        assert self.task is not None
        reward = await verifiers.ascore(self.verifier, answer, self.task)
        note = Message("user", f"Answer submitted: {answer[:200]}")
        return StepResult((*messages, note), reward, terminated=True,
                          info={"valid": valid, "success": reward >= 1.0,
                                "answer": answer[:1000]})

    def state_key(self) -> str | None:
        """The task and a digest of every tool call and result so far."""
        return None if self.task is None else f"{self.task.id}|{self._history.hexdigest()[:16]}"

    def expert_action(self) -> Message:
        """The task's next solution call, then the answer (the ``scripted`` policy)."""
        assert self.task is not None
        if self.turn < len(self.task.solution):
            return Message("assistant", "", (self.task.solution[self.turn],))
        if self.answer_tool:
            call = ToolCall(f"call_{self.turn}", self.answer_tool,
                            {"answer": str(self.task.answer)})
            return Message("assistant", "", (call,))
        return Message("assistant", f"<{self.answer_tag}>{self.task.answer}</{self.answer_tag}>")

    async def _close_state(self) -> None:
        state, self.state = self.state, None
        closer = getattr(state, "aclose", None)
        if closer is not None:
            await closer()

    async def _close(self) -> None:
        await self._close_state()


_SCALAR_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str, "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) in (int, float), "boolean": lambda v: type(v) is bool}


class _FastValidator:
    """Accepts flat scalar arguments without jsonschema; anything else goes to ``full``.

    It only ever says "valid" for arguments the full validator accepts too (a subset of
    JSON-schema types, no enums), so error messages always come from jsonschema.
    """

    def __init__(self, full: Any, spec: ToolSpec) -> None:
        self.full = full
        params = spec.parameters
        props = params.get("properties", {})
        simple = (params.get("type") == "object" and isinstance(props, Mapping) and all(
            isinstance(p, Mapping) and isinstance(p.get("type"), str)
            and p["type"] in _SCALAR_CHECKS
            and set(p) <= {"type", "description", "title"} for p in props.values())
            and set(params) <= {"type", "properties", "required", "additionalProperties",
                                "title"} and params.get("additionalProperties", False) is False)
        self.checks = ({k: _SCALAR_CHECKS[p["type"]] for k, p in props.items()} if simple
                       else None)
        self.required = tuple(params.get("required", ()))

    def iter_errors(self, instance: Any) -> Any:
        checks = self.checks
        if (checks is not None and type(instance) is dict
                and all(k in instance for k in self.required)
                and all(k in checks and checks[k](v) for k, v in instance.items())):
            return ()
        return self.full.iter_errors(instance)


class _DaemonWorkers:
    """Daemon threads that run sync tools; a new one starts whenever none is idle.

    Daemon threads, unlike ``asyncio.to_thread``'s executor, never hold up interpreter exit,
    so a tool that hangs forever costs one parked thread, not a hung process.
    """

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], None]]] = queue.SimpleQueue()
        self.idle = 0
        self.lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self.lock:
            start = self.idle == 0
            self.idle -= 0 if start else 1
        if start:
            threading.Thread(target=self._work, args=(job,), name="agentgym-tool",
                             daemon=True).start()
        else:
            self.jobs.put((job,))

    def _work(self, job: Callable[[], None]) -> None:
        while True:
            job()
            with self.lock:
                self.idle += 1
            (job,) = self.jobs.get()


_WORKERS = _DaemonWorkers()


async def _in_daemon_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Run ``fn(**kwargs)`` in a daemon worker; a hung call never blocks the loop or exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # cancelled by the tool timeout: drop the late result
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            # A fresh decimal context per call: a tool that sets the precision changes only its
            # own call, not the next call on this reused thread (another episode's).
            with decimal.localcontext(decimal.Context()):
                value, ok = fn(**kwargs), True
        except BaseException as exc:  # handed to the awaiting task, which decides
            value, ok = exc, False
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop closed while the call hung
            pass

    _WORKERS.submit(work)
    return await future
