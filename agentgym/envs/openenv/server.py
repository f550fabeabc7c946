"""Any registered agentgym env as an OpenEnv server, on openenv-core's own server classes.

:class:`AgentGymEnvironment` is an OpenEnv ``Environment`` holding one agentgym env;
:func:`build_app` hands it to openenv-core's ``create_app`` (its FastAPI app, its HTTP and
WebSocket routes, its sessions), and :func:`serve` runs that app with uvicorn. Clients are
OpenEnv's own (``GenericEnvClient``, TRL's OpenEnv examples) or agentgym's
:class:`~agentgym.envs.openenv.OpenEnvEnv`.

- **Sessions.** Each WebSocket session gets its own env (OpenEnv calls the factory per
  session); up to ``max_sessions`` run at once. The env is async: it runs on the server's
  event loop (OpenEnv awaits ``reset_async``/``step_async``), so sessions interleave there.
- **Seeds and options** pass to ``env.reset(seed=..., options=...)`` unchanged.
- **Agent mistakes** stay observations (``info["valid"] = False``), as in process.
- **Env faults** (the env raised) reach the client as OpenEnv's error message with code
  ``EXECUTION_ERROR`` and a text starting with :data:`ENV_FAULT`, which a client tells
  apart from a malformed request (``VALIDATION_ERROR``) and from a session it could not get
  (``CAPACITY_REACHED``, ``FACTORY_ERROR``).
- OpenEnv's stateless ``POST /reset`` and ``POST /step`` build a fresh env per request, so
  only ``reset`` is meaningful there; episodes go over the WebSocket (``/ws``).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Callable, Mapping
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

import agentgym
from agentgym.env import Env

from .models import AgentGymAction, AgentGymObservation, AgentGymState

ENV_FAULT = "agentgym env fault"
"""How the text of an env fault starts (OpenEnv code ``EXECUTION_ERROR``)."""
CLOSE_TIMEOUT_S = 60.0
"""How long closing one session's env may take before the server moves on."""
_closing: set[asyncio.Task[None]] = set()  # strong references to closes run in the background


class EnvFault(RuntimeError):
    """The served env raised during reset or step (an infrastructure fault, not the agent's)."""


class AgentGymEnvironment(Environment[AgentGymAction, AgentGymObservation, AgentGymState]):
    """One agentgym env behind OpenEnv's ``Environment`` interface.

    The agentgym env is made on the first reset, on the server's event loop, and closed
    when OpenEnv closes the session.

    Args:
        env_id: A registered agentgym env id.
        env_kwargs: Keyword arguments for ``agentgym.make``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # one agentgym env per session, nothing shared

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self._env: Env | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = AgentGymState(env_id=env_id, env_kwargs=self.env_kwargs)

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          options: dict[str, Any] | None = None, **kwargs: Any
                          ) -> AgentGymObservation:
        """Reset the agentgym env (made here the first time) with ``seed`` and ``options``."""
        self._loop = asyncio.get_running_loop()
        try:
            if self._env is None:
                self._env = agentgym.make(self.env_id, **self.env_kwargs)
            messages, info = await self._env.reset(seed=seed, options=options)
        except Exception as exc:
            raise EnvFault(f"{ENV_FAULT}: {self.env_id} reset: {type(exc).__name__}: {exc}"
                           ) from exc
        self._state = AgentGymState(env_id=self.env_id, env_kwargs=self.env_kwargs, seed=seed,
                                    episode_id=episode_id, step_count=0)
        return AgentGymObservation.from_reset(self._env, messages, info)

    async def step_async(self, action: AgentGymAction, timeout_s: float | None = None,
                         **kwargs: Any) -> AgentGymObservation:
        """Apply one assistant turn; agent mistakes come back as observations."""
        if self._env is None:
            raise EnvFault(f"{ENV_FAULT}: {self.env_id} step before reset; send a reset first")
        try:
            result = await self._env.step(action.to_message())
        except Exception as exc:
            raise EnvFault(f"{ENV_FAULT}: {self.env_id} step: {type(exc).__name__}: {exc}"
                           ) from exc
        self._state.step_count += 1
        self._state.done = result.done
        return AgentGymObservation.from_step(result)

    # OpenEnv's sync entry points, for callers with no event loop of their own (the server
    # uses the async ones above).
    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> AgentGymObservation:
        """Sync :meth:`reset_async`, for a caller with no event loop."""
        return asyncio.run(self.reset_async(seed, episode_id, **kwargs))

    def step(self, action: AgentGymAction, timeout_s: float | None = None,
             **kwargs: Any) -> AgentGymObservation:
        """Sync :meth:`step_async`, for a caller with no event loop."""
        return asyncio.run(self.step_async(action, timeout_s))

    @property
    def state(self) -> AgentGymState:
        """The session's env id, kwargs, seed and step count."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Name and description from the agentgym registry."""
        spec = agentgym.spec(self.env_id)
        version = spec.id.rpartition("-v")[2]
        return EnvironmentMetadata(name=self.env_id, description=spec.description,
                                   version=version if version.isdigit() else None)

    def close(self) -> None:
        """Close the agentgym env (OpenEnv calls this from a worker thread or the loop)."""
        env, self._env = self._env, None
        if env is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:  # on the loop itself (OpenEnv's stateless HTTP routes)
            task = running.create_task(env.aclose())
            _closing.add(task)
            task.add_done_callback(_closing.discard)
        elif self._loop is not None and self._loop.is_running():  # a worker thread
            asyncio.run_coroutine_threadsafe(env.aclose(), self._loop).result(CLOSE_TIMEOUT_S)
        else:
            asyncio.run(env.aclose())


def check_env(env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """Make and close the env once, so a bad id or kwargs fail before the server starts.

    Raises:
        UnknownEnvError, EnvArgumentError, ConfigError: as ``agentgym.make`` does.
    """
    env = agentgym.make(env_id, **env_kwargs)
    asyncio.run(env.aclose())


def build_app(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
              max_sessions: int = 64) -> Any:
    """openenv-core's FastAPI app serving ``env_id`` (see the module docstring).

    Args:
        env_id: A registered agentgym env id.
        env_kwargs: Keyword arguments for ``agentgym.make``.
        max_sessions: Most WebSocket sessions (episodes) at once.

    Returns:
        The app (``uvicorn.run(app)`` serves it).
    """
    factory: Callable[[], AgentGymEnvironment] = functools.partial(
        AgentGymEnvironment, env_id, dict(env_kwargs or {}))
    return create_app(factory, AgentGymAction, AgentGymObservation, env_name=env_id,
                      max_concurrent_envs=max_sessions)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve(app: Any, sock: socket.socket,
                on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` on ``sock`` until cancelled; ``on_ready(url)`` once it listens."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", ws="websockets-sansio")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # raises what stopped it
            return
        await asyncio.sleep(0.05)
    host, port = sock.getsockname()[:2]
    if on_ready is not None:
        on_ready(f"http://{host if ':' not in host else f'[{host}]'}:{port}")
    try:
        await task
    finally:
        server.should_exit = True
