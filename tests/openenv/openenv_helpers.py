"""Serving an app on 127.0.0.1 for a test, and playing an env's expert in process."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import agentgym
from agentgym import Message, StepResult

READY_S = 300.0
"""A bound on a hang (a loaded 2-core machine), not a performance check."""


@contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; yields its URL."""
    import uvicorn

    from agentgym.envs.openenv.server import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="websockets-sansio"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + READY_S
    while not server.started:
        assert thread.is_alive(), "the server thread ended before it listened"
        assert time.monotonic() < deadline, f"the server did not start in {READY_S:g} s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(READY_S)
        sock.close()


@dataclass(frozen=True)
class Episode:
    """What an env returned for one seed, in JSON-ready form (as a wire carries it)."""

    prompt: list[dict[str, Any]]
    reset_info: dict[str, Any]
    tools: list[dict[str, Any]]
    actions: list[Message]
    results: list[dict[str, Any]]


def _jsonable_info(info: dict[str, Any]) -> dict[str, Any]:
    return StepResult((), info=info).to_dict()["info"]


async def expert_episode(env_id: str, seed: int, max_steps: int = 200, **kwargs: Any
                         ) -> Episode:
    """Play the env's expert in process for one seed."""
    env = agentgym.make(env_id, **kwargs)
    try:
        messages, info = await env.reset(seed=seed)
        tools = [t.to_dict() for t in env.tools]
        actions, results = [], []
        for _ in range(max_steps):
            action = env.expert_action()
            if inspect.isawaitable(action):
                action = await action
            result = await env.step(action)
            actions.append(action)
            results.append(result.to_dict())
            if result.done:
                break
        return Episode([m.to_dict() for m in messages], _jsonable_info(info), tools, actions,
                       results)
    finally:
        await env.aclose()


async def replay(env: Any, seed: int, actions: list[Message]) -> Episode:
    """Play ``actions`` on ``env`` (any agentgym env) from ``reset(seed)``."""
    messages, info = await env.reset(seed=seed)
    tools = [t.to_dict() for t in env.tools]
    results = []
    for action in actions:
        results.append((await env.step(action)).to_dict())
    return Episode([m.to_dict() for m in messages], _jsonable_info(info), tools, list(actions),
                   results)
