"""MCPEnv: any MCP server's tools as the tool set of an env.

Give it a server — a command line (spoken to over stdio, one fresh server process per
episode) or an ``http(s)://`` URL (streamable HTTP, one fresh session per episode) — plus
tasks and a verifier, as for :class:`~agentgym.ToolEnv`. At each reset the env connects,
lists the server's tools and offers them to the model with their JSON schemas; calls are
validated against those schemas before they reach the server.

Errors: a tool result marked ``isError`` by the server, a call that runs past
``call_timeout`` and a call with bad arguments are agent mistakes (observations with
``valid=False``). A server that cannot be started or reached, or that dies mid-episode, is
an infrastructure fault (:class:`~agentgym.tool_env.ToolFault`): the rollout engine records
the episode as an ``error`` trajectory and the rest of the batch runs on.

The session is held open by a background task of its own, because the ``mcp`` client's
context managers must be entered and left in one task, while ``reset``, ``step`` and
``aclose`` may each run in a different one (the Gymnasium bridge does this).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError, MissingExtraError
from agentgym.tool_env import Task, TaskSource, ToolEnv, ToolFault
from agentgym.tools import Tool
from agentgym.types import ToolSpec
from agentgym.verifiers import Verifier


class MCPToolError(Exception):
    """The server answered a call with an error result (shown to the model)."""


class MCPConnection:
    """One MCP client session, held open by a background task.

    Args:
        server: ``http(s)://...`` URL, or a command line (a string or an argv list).
        env: Extra environment variables for a stdio server process.
        cwd: Working directory of a stdio server process.
        call_timeout: Seconds a call may wait for the server.
    """

    def __init__(self, server: str | Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, call_timeout: float = 30.0) -> None:
        try:
            from mcp import Client
            from mcp.client.stdio import StdioServerParameters
        except ImportError as exc:
            raise MissingExtraError("mcp", "tools", "MCPEnv") from exc
        self._client_cls = Client
        if isinstance(server, str) and server.startswith(("http://", "https://")):
            self.target: Any = server
        else:
            argv = shlex.split(server) if isinstance(server, str) else list(server)
            if not argv:
                raise ConfigError("server is empty; give a URL or a command such as "
                                  "['python', 'my_server.py']")
            self.target = StdioServerParameters(command=argv[0], args=argv[1:],
                                                env={**os.environ, **(env or {})}, cwd=cwd)
        self.call_timeout = call_timeout
        self._client: Any = None
        self._ready: asyncio.Future[list[Any]] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    async def open(self, timeout: float) -> list[ToolSpec]:  # noqa: ASYNC109 - connect budget
        """Connect and list the server's tools; raises ToolFault when it cannot."""
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(), name="mcp-connection")
        try:
            async with asyncio.timeout(timeout):
                tools = await asyncio.shield(self._ready)
        except BaseException as exc:
            await self.aclose()
            raise ToolFault(f"could not connect to the MCP server {self._describe()}: "
                            f"{type(exc).__name__}: {exc}") from exc
        return [ToolSpec(t.name, t.description or "",
                         dict(t.input_schema or {"type": "object", "properties": {}}))
                for t in tools]

    async def _hold(self) -> None:
        assert self._ready is not None
        try:
            async with self._client_cls(self.target,
                                        read_timeout_seconds=self.call_timeout + 10) as client:
                listed = await client.list_tools()
                self._client = client
                self._ready.set_result(list(listed.tools))
                await self._stop.wait()
        except BaseException as exc:  # kept for call() to report; the task must not die loud
            self._error = exc
            if not self._ready.done():
                self._ready.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool; its text content, or MCPToolError / ToolFault."""
        client = self._client
        if client is None:
            why = f": {type(self._error).__name__}: {self._error}" if self._error else ""
            raise ToolFault(f"the MCP server {self._describe()} is not connected{why}")
        try:  # text the wire cannot carry (a lone surrogate) would close the transport
            json.dumps(arguments, ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, ValueError, TypeError, RecursionError) as exc:
            raise MCPToolError(f"the arguments of {name} cannot be sent as UTF-8 JSON "
                               f"({type(exc).__name__}); use plain text") from None
        try:
            result = await client.call_tool(name, arguments)
        except Exception as exc:  # transport closed, server gone, protocol failure
            raise ToolFault(f"the MCP server {self._describe()} failed during {name}: "
                            f"{type(exc).__name__}: {exc}") from exc
        text = _text_of(result)
        if result.is_error:
            raise MCPToolError(text or "the server reported an error")
        return text

    @property
    def alive(self) -> bool:
        """Whether the session is open and its holder task still runs."""
        return self._client is not None and self._task is not None and not self._task.done()

    def _describe(self) -> str:
        if isinstance(self.target, str):
            return self.target
        return shlex.join([self.target.command, *self.target.args])[:120]

    async def aclose(self) -> None:
        """End the session (and a stdio server process); idempotent."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            except BaseException:  # noqa: S110 - already recorded in _error
                pass


def _text_of(result: Any) -> str:
    parts = []
    for item in result.content or ():
        text = getattr(item, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(item, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str))
    return "\n".join(parts)


class MCPEnv(ToolEnv):
    """An env whose tools are an MCP server's; see the module docstring.

    Args:
        server: ``http(s)://...`` URL (streamable HTTP) or a command line (stdio).
        tasks: Tasks, as for :class:`~agentgym.ToolEnv`.
        verifier: ``"exact"``, ``"numeric"``, ``"contains"`` or ``fn(answer, task)``.
        server_env: Extra environment variables for a stdio server.
        cwd: Working directory of a stdio server.
        call_timeout: Seconds per tool call (past it: a timed-out observation).
        connect_timeout: Seconds to start and connect (past it: an error trajectory).
        fresh_server_per_episode: Start a new server process (stdio) or session (HTTP) at
            every reset, so no episode sees another's server state. ``False`` keeps one
            connection for the env's life (reconnecting if it died): for stateless servers.
        system_prompt: Optional system message.
        instructions: Text after the task prompt (default: how to answer).
        max_turns: Truncate after this many steps.
        max_output_chars: Tool results longer than this are cut.
    """

    def __init__(self, server: str | Sequence[str], tasks: TaskSource,
                 verifier: str | Verifier = "exact", *,
                 server_env: Mapping[str, str] | None = None, cwd: str | None = None,
                 call_timeout: float = 30.0, connect_timeout: float = 60.0,
                 fresh_server_per_episode: bool = True,
                 system_prompt: str | None = None, instructions: str | None = None,
                 max_turns: int | None = None, max_output_chars: int = 8_000) -> None:
        self.server, self.server_env, self.cwd = server, server_env, cwd
        self.call_timeout, self.connect_timeout = call_timeout, connect_timeout
        self.fresh_server_per_episode = fresh_server_per_episode
        self._conn: MCPConnection | None = None
        self._specs: list[ToolSpec] | None = None
        super().__init__(tasks, [], verifier=verifier, system_prompt=system_prompt,
                         instructions=instructions, state_factory=self._connect,
                         max_turns=max_turns, timeout=call_timeout,
                         max_output_chars=max_output_chars)

    async def _connect(self, task: Task) -> _Episode:
        if self._conn is not None and (self.fresh_server_per_episode or not self._conn.alive):
            await self._conn.aclose()
            self._conn = None
        if self._conn is None:
            conn = MCPConnection(self.server, env=self.server_env, cwd=self.cwd,
                                 call_timeout=self.call_timeout)
            specs = await conn.open(self.connect_timeout)
            self._conn = conn
            if specs != self._specs:  # first episode, or the server changed its tools
                self._specs = specs
                self.set_tools([Tool(self._caller(s.name), s, self.call_timeout) for s in specs])
        return _Episode(task, self._conn)

    def _caller(self, name: str) -> Callable[..., Any]:
        async def call(**arguments: Any) -> str:
            return await self.state.conn.call(name, arguments)

        call.__name__ = name
        return call

    async def _close(self) -> None:
        await super()._close()
        if self._conn is not None:
            await self._conn.aclose()
            self._conn = None


@dataclass
class _Episode:
    """Per-episode state: the task and the connection its calls go to."""

    task: Task
    conn: MCPConnection
