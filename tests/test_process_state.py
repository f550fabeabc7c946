"""No env changes process-wide state that other episodes (or other code) in the process see.

Episodes share a process: numeric precision (``decimal``, mpmath), the working directory,
environment variables, the global random generators, interpreter limits, signal handlers and
the like are shared by every episode and by the trainer. Every registered env that runs here
(Docker and GPU ones are left out; browser ones run under the ``browser`` marker) plays
episodes with its expert and with hostile replies, and all of that state must read the same
afterwards.
"""

from __future__ import annotations

import asyncio
import decimal
import inspect
import locale
import os
import random
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import agentgym
from agentgym import BaseEnv, StepResult, ToolCall, ToolEnv
from agentgym.fuzz import fuzz_env
from agentgym.types import Message

BROWSER_IDS = ("agentgym/WebShop-v0", "miniwob/enter-text-v0")
"""Browser envs checked (the MiniWoB tasks share one env class; this one has an expert)."""
LIBRARY_DRAWS = {"agentgym/WebShop-v0": {"random"}, "miniwob/enter-text-v0": {"random"}}
"""Changes made by a library, not the env: Playwright draws four letters from Python's global
generator for a call-id prefix each time it connects to a browser (``trace_utils.py``). It
draws, it does not seed; rewinding the generator around an await would repeat other tasks'
draws, so it is allowed here and nowhere else."""
EXPERT_STEPS = 40
HOSTILE_REPLIES = 30
SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE,
                            signal.SIGALRM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2))


def _ids() -> list[Any]:
    ids: list[Any] = []
    for env_id, spec in agentgym.registry.items():
        needs = set(spec.system_requirements)
        if needs & {"docker", "gpu"}:
            continue
        if "browser" in needs:
            if env_id in BROWSER_IDS:
                ids.append(pytest.param(env_id, marks=pytest.mark.browser, id=env_id))
            continue
        ids.append(pytest.param(env_id, id=env_id))
    return ids


def _decimal(context: decimal.Context) -> tuple[Any, ...]:
    return (context.prec, context.rounding, context.Emin, context.Emax, context.capitals,
            context.clamp, sorted(k.__name__ for k, v in context.traps.items() if v))


def snapshot() -> dict[str, Any]:
    """The process-wide state an env must leave as it found it."""
    umask = os.umask(0o022)
    os.umask(umask)
    state: dict[str, Any] = {
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "decimal (this thread)": _decimal(decimal.getcontext()),
        "decimal (defaults)": _decimal(decimal.DefaultContext),
        "random": random.getstate(),
        "numpy.random": repr(np.random.get_state(legacy=False)),
        "recursion limit": sys.getrecursionlimit(),
        "int digits limit": sys.get_int_max_str_digits(),
        "float repr": (sys.float_info.dig, repr(0.1)),
        "signals": {s.name: signal.getsignal(s) for s in SIGNALS},
        "socket timeout": socket.getdefaulttimeout(),
        "locale": locale.setlocale(locale.LC_ALL, None),
        "umask": umask,
        "thread stack size": threading.stack_size(),
        "sys.path": list(sys.path),
        "switch interval": sys.getswitchinterval(),
    }
    mpmath = sys.modules.get("mpmath")
    if mpmath is not None:
        state["mpmath precision"] = (mpmath.mp.prec, mpmath.mp.dps)
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = (torch.get_num_threads(), torch.get_default_dtype(),
                          torch.are_deterministic_algorithms_enabled())
    return state


async def _play(env_id: str) -> None:
    env = agentgym.make(env_id)
    try:
        expert = getattr(env, "expert_action", None)
        if expert is not None:
            for seed in (0, 1):
                await env.reset(seed=seed)
                for _ in range(EXPERT_STEPS):
                    try:
                        action = expert()
                        action = await action if inspect.isawaitable(action) else action
                    except Exception:  # noqa: BLE001 - no expert move here: stop this episode
                        break
                    if not isinstance(action, Message) or (await env.step(action)).done:
                        break
    finally:
        await env.aclose()
    # Hostile replies reach the error paths, where state changes tend to hide.
    report = await fuzz_env(agentgym.make(env_id), replies=HOSTILE_REPLIES, seed=3)
    assert not report.failures, report.failures[:3]


def changed_by(play: Callable[[], None]) -> dict[str, tuple[Any, Any]]:
    """What ``play()`` changed of :func:`snapshot` (name -> (before, after))."""
    # A seed of the tests' own, so an env that seeds (or draws from) the global generators
    # shows, even when it does the same in every run.
    random.seed("process-state")
    np.random.seed(20261128)
    before = snapshot()
    play()
    after = snapshot()
    changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
               if before.get(k) != after.get(k)}
    if "environ" in changed:  # only the variables that differ
        b, a = changed["environ"]
        keys = {k for k in b.keys() | a.keys() if b.get(k) != a.get(k)}
        changed["environ"] = ({k: b.get(k) for k in keys}, {k: a.get(k) for k in keys})
    return changed


@pytest.mark.parametrize("env_id", _ids())
def test_episodes_leave_process_state_as_they_found_it(env_id: str) -> None:
    if env_id in BROWSER_IDS:
        from test_tool_call_contract import _needs_browser

        _needs_browser(env_id)
    # Anything loaded lazily on first use (a module's import-time setup) is loaded first, so
    # only what the episodes themselves change is compared.
    asyncio.run(_play(env_id))
    changed = changed_by(lambda: asyncio.run(_play(env_id)))
    for kind in LIBRARY_DRAWS.get(env_id, ()):
        changed.pop(kind, None)
    assert not changed, f"{env_id} changed process-wide state: " + "; ".join(
        f"{k}: {str(v[0])[:150]} -> {str(v[1])[:150]}" for k, v in sorted(changed.items()))


class _Meddles(BaseEnv):
    """An env whose step changes one piece of process state (to show the check sees it)."""

    tools = ()

    def __init__(self, change: Callable[[], None]) -> None:
        super().__init__()
        self.change = change

    async def _reset(self, seed: int | None, options: Any) -> tuple[list[Message], dict]:
        return [Message("user", "go")], {}

    async def _step(self, action: Message) -> StepResult:
        self.change()
        return StepResult((Message("user", "done"),), 0.0, terminated=True)


@pytest.mark.parametrize("kind, change", [
    ("cwd", lambda: os.chdir("/")),
    ("environ", lambda: os.environ.__setitem__("AGENTGYM_MEDDLED", "1")),
    ("decimal (this thread)", lambda: setattr(decimal.getcontext(), "prec", 5)),
    ("random", lambda: random.seed(0)),
    ("numpy.random", lambda: np.random.seed(0)),
    ("recursion limit", lambda: sys.setrecursionlimit(sys.getrecursionlimit() + 7)),
    ("signals", lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN)),
])
def test_the_check_sees_each_kind_of_change(kind: str, change: Callable[[], None]) -> None:
    async def episode() -> None:
        env = _Meddles(change)
        await env.reset(seed=0)
        await env.step(Message("assistant", "x"))

    cwd, limit, context = os.getcwd(), sys.getrecursionlimit(), decimal.getcontext().copy()
    usr2 = signal.getsignal(signal.SIGUSR2)
    try:
        changed = changed_by(lambda: asyncio.run(episode()))
    finally:  # undo the change for the rest of the session
        os.chdir(cwd)
        os.environ.pop("AGENTGYM_MEDDLED", None)
        decimal.setcontext(context)
        sys.setrecursionlimit(limit)
        signal.signal(signal.SIGUSR2, usr2)
    assert kind in changed


def _third() -> str:
    return str(decimal.Decimal(1) / decimal.Decimal(3))


def leak_precision(digits: int) -> int:
    """Set the decimal precision and say what it was before.

    Args:
        digits: The precision to set.
    """
    before = decimal.getcontext().prec
    decimal.getcontext().prec = digits
    return before


async def leak_precision_async(digits: int) -> int:
    """Set the decimal precision and say what it was before (a coroutine).

    Args:
        digits: The precision to set.
    """
    await asyncio.sleep(0)
    return leak_precision(digits)


@pytest.mark.parametrize("mode", ["thread", "inline", "async"])
async def test_a_tool_that_sets_decimal_precision_changes_its_own_call_only(mode: str) -> None:
    """Tool threads are reused by other episodes, and inline tools share the loop's thread."""
    fn = leak_precision_async if mode == "async" else leak_precision
    env = ToolEnv([{"prompt": "p", "answer": "a"}], [fn],
                  sync_tools="inline" if mode == "inline" else "thread")
    default = decimal.Context().prec
    seen = []
    try:
        # More calls than idle tool threads: without a fresh context per call, some thread
        # serves two and its second call starts at the precision the first one left.
        for episode in range(300 if mode == "thread" else 3):
            await env.reset(seed=episode)
            call = ToolCall("c", fn.__name__, {"digits": 3})
            result = await env.step(Message("assistant", "", (call,)))
            seen.append(result.observation[0].content)
    finally:
        await env.aclose()
    assert set(seen) == {str(default)}
    assert decimal.getcontext().prec == default and len(_third()) == default + 2
