"""What the text-world envs whose engine is a pooled jar (ScienceWorld, TWX) do alike.

Both wrap their package's Python API around one simulator in a shared JVM
(:mod:`agentgym.envs.jvm`), read one free-text command a turn, and offer the benchmark's gold
action sequence as the expert. :class:`JVMTextEnv` holds that common part: leasing and
returning the simulator, the turn's command handling, and the gold path's bookkeeping. A
subclass loads its episodes and says how to read the engine's answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from agentgym.env import BaseEnv
from agentgym.errors import ConfigError, EnvStateError
from agentgym.types import Message, StepResult

from .jvm import EngineFault, JavaError, JVMPool, Lease, call_engine
from .text_commands import parse_command

NO_STEP_LIMIT = 10**9
"""``envStepLimit`` for ``step_limit=None``: more moves than any episode makes."""

NO_COMMAND = ("Your reply held no command. Reply with one command, e.g. "
              "<action>look around</action>.")


class JVMTextEnv(BaseEnv):
    """Base for an env on one simulator in a shared JVM, played one text command a turn.

    A subclass implements ``_reset`` (loading an episode through :meth:`_ensure_engine`
    and setting ``_info``), :meth:`_step_info`, :meth:`_valid` and :meth:`_load_gold`,
    and may override :meth:`_terminated`.

    Args:
        benchmark: The benchmark's name, for engine faults and errors (``"ScienceWorld"``).
        pool: The process-wide pool running the benchmark's jar.
        make_engine: A fresh simulator, with the package's API, in a leased JVM.
        valid_actions_in_info: Put the engine's valid action list in every info.
        step_limit: The package's ``envStepLimit``: the engine's move count past which the
            package ends the episode (we report that end as a truncation); None for none.

    Raises:
        ConfigError: ``step_limit`` is not a positive int or None.
    """

    def __init__(self, benchmark: str, pool: Callable[[], JVMPool],
                 make_engine: Callable[[Lease], Any], valid_actions_in_info: bool,
                 step_limit: int | None) -> None:
        super().__init__()
        if step_limit is not None and (isinstance(step_limit, bool)
                                       or not isinstance(step_limit, int) or step_limit < 1):
            raise ConfigError(f"step_limit must be a positive int (the benchmark's limit on "
                              f"moves, 100) or None for no limit, got {step_limit!r}")
        self.benchmark = benchmark
        self.valid_actions_in_info = valid_actions_in_info
        self.step_limit = step_limit
        self._pool = pool
        self._make_engine = make_engine
        self._lease: Lease | None = None
        self._engine: Any = None
        self._info: dict[str, Any] = {}  # the engine's last info; empty before reset
        self._gold: list[str] | None = None
        self._commands: list[str] = []  # what the engine was sent this episode
        # Engine calls running in worker threads, and the release that waits for them: a call
        # whose caller was cancelled (a step timeout) runs on, so its isolate may go back to
        # the pool only when it ends (see _close).
        self._running = 0
        self._after_calls: Callable[[], None] | None = None
        self._guard = threading.Lock()

    # -- to implement ----------------------------------------------------------------
    def _step_info(self, *, valid: bool) -> dict[str, Any]:
        """The info of a turn (``valid``: the engine understood the command)."""
        raise NotImplementedError

    def _valid(self, observation: str) -> bool:
        """Whether the engine's answer says it understood the command."""
        raise NotImplementedError

    async def _task_over(self) -> bool:
        """Whether the task itself ended (success or failure), as the engine says."""
        raise NotImplementedError

    async def _load_gold(self) -> list[str]:
        """Load the current episode again, now with its gold path, and return that path."""
        raise NotImplementedError

    # -- episode ---------------------------------------------------------------------
    async def _step(self, action: Message) -> StepResult:
        command = parse_command(action.content)
        if not command:
            return StepResult((Message("user", NO_COMMAND),), 0.0, terminated=False,
                              info=self._step_info(valid=False))
        self._commands.append(command)
        try:
            observation, reward, completed, info = await self._call(self._engine.step, command)
        except JavaError as exc:  # the engine choked on this input: the agent's mistake
            text = f"The command {command!r} could not be carried out ({first_line(exc)})."
            return StepResult((Message("user", text),), 0.0, terminated=False,
                              info={**self._step_info(valid=False), "error": str(exc)[:200]})
        self._info = info
        # The package's `done` covers the task's end and its own step limit: a done the task
        # did not cause is the limit, a truncation.
        terminated = bool(completed) and await self._task_over()
        return StepResult((Message("user", observation.strip()),), float(reward),
                          terminated=terminated, truncated=bool(completed) and not terminated,
                          info=self._step_info(valid=self._valid(observation)))

    def _opening(self, text: str, info: dict[str, Any]) -> tuple[list[Message], dict[str, Any]]:
        """What reset returns: the first observation, and ``info`` (with the valid actions)."""
        if self.valid_actions_in_info:
            info["valid_actions"] = self._step_info(valid=True)["valid_actions"]
        return [Message("user", text)], info

    async def expert_action(self) -> Message:
        """The next command of the benchmark's gold action sequence for this episode.

        The gold path is made by the engine on first use (a reload of the same episode), so
        it is only available before the first move or while on the path.

        Raises:
            EnvStateError: before reset, after the episode left the gold path, or past its end.
        """
        name = type(self).__name__
        if not self._info:
            raise EnvStateError(f"{name}.expert_action() before reset(); call "
                                "`await env.reset(seed=...)` first")
        if self._gold is None:
            if self._commands:
                raise EnvStateError(f"{name}.expert_action(): the gold path is made when the "
                                    "episode is loaded; ask for it before the first move")
            self._gold = await self._load_gold()
        done = len(self._commands)
        if self._commands != self._gold[:done]:
            raise EnvStateError(f"{name}.expert_action(): the episode left the gold path at "
                                f"move {done}; the gold sequence only replays from the start")
        if done >= len(self._gold):
            raise EnvStateError(f"{name}.expert_action(): the gold sequence is exhausted but "
                                "the episode has not ended")
        return Message("assistant", self._gold[done])

    async def _close(self) -> None:
        if self._lease is not None:
            engine, lease, pool = self._engine, self._lease, self._pool()
            self._engine = self._lease = None

            def give_back() -> None:
                try:
                    if engine is not None:  # None: the reset stopped before it was made
                        engine.close()
                finally:
                    pool.release(lease)

            with self._guard:
                if self._running:  # a cancelled call still runs on this isolate: after it
                    self._after_calls = give_back
                    return
            give_back()

    # -- helpers for subclasses ------------------------------------------------------
    async def _ensure_engine(self) -> Any:
        """This env's simulator, leased from the pool on first use."""
        if self._engine is None:
            if self._lease is None:
                self._lease = await _lease_or_return(self._pool())
            self._engine = await self._call(self._make_engine, self._lease)
            self._engine.envStepLimit = self.step_limit or NO_STEP_LIMIT
        return self._engine

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one blocking engine call off the event loop (see :func:`~.jvm.call_engine`)."""
        return await call_engine(self._counted, fn, *args, engine=self.benchmark)

    def _counted(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread, counted so that closing waits for it to end."""
        with self._guard:
            if self.closed:  # a call queued before the close, started after it
                raise EngineFault(f"{self.benchmark}: the env was closed before this engine "
                                  "call started")
            self._running += 1
        try:
            return fn(*args)
        finally:
            with self._guard:
                self._running -= 1
                after = self._after_calls if not self._running else None
                if after is not None:
                    self._after_calls = None
            if after is not None:
                after()


async def _lease_or_return(pool: JVMPool) -> Lease:
    """A lease from ``pool``, taken in a worker thread.

    If the caller stops waiting (a reset cancelled by its timeout), the lease is returned to
    the pool when the thread gets it, so no isolate stays held by no episode.
    """
    leasing = asyncio.ensure_future(asyncio.to_thread(pool.lease))
    try:
        return await asyncio.shield(leasing)
    except asyncio.CancelledError:
        def give_back(done: asyncio.Future[Lease]) -> None:
            if not done.cancelled() and done.exception() is None:
                pool.release(done.result())
        leasing.add_done_callback(give_back)
        raise


def first_line(exc: BaseException) -> str:
    """The Java exception's message line from a py4j error (its class name when none)."""
    lines = [ln for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("An error")]
    return lines[0].strip(": ") if lines else type(exc).__name__
