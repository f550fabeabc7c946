"""Any OpenEnv server as an agentgym env: ``agentgym.make("openenv:http://HOST:PORT")``.

:class:`OpenEnvEnv` drives a server through openenv-core's own WebSocket client
(``GenericEnvClient``): one connection, hence one server-side session, per env; each
``reset`` starts an episode in it. ``rollout``, ``eval`` and ``train`` take the id as they
take a registered one.

- **An agentgym server** (``agentgym openenv serve``) sends agentgym's records whole: the
  messages, tools, reward, ``terminated``/``truncated`` and info come back exactly as the
  env made them in its own process.
- **Any other OpenEnv server**: the observation (less reward and done) is shown to the model
  as JSON in a user message, and the model acts by calling one tool, ``act``, whose parameters
  are the server's action schema (``GET /schema``). When that schema has a single required
  text field, a plain reply fills it (``prose_is_action``). Arguments that do not match the
  schema are the agent's mistake: an observation with ``valid=False``, never sent.
  ``done`` is reported as ``terminated`` (OpenEnv does not tell the two apart).
- **Faults** (a refused or lost connection, a timeout, an error the server sends) raise
  :class:`OpenEnvFault`; the rollout engine records the episode as ``status="error"``,
  never scored. The connection is dropped, so the next ``reset`` starts a new session.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp
import jsonschema

from agentgym.errors import ConfigError, EnvClosedError, MissingExtraError, ResetNeeded
from agentgym.types import Message, StepResult, ToolCall, ToolSpec

ACT_TOOL = "act"
"""The tool a model calls to act in a server that is not agentgym's."""
SCHEMES = ("http://", "https://", "ws://", "wss://")


class OpenEnvFault(RuntimeError):
    """The OpenEnv server could not be reached, went away, timed out or sent an error."""


class OpenEnvEnv:
    """An OpenEnv server as an agentgym env (see the module docstring).

    Args:
        url: The server's base URL, ``http://HOST:PORT`` (``ws://`` works too).
        timeout: Seconds one reset or step may take on the server.
        connect_timeout: Seconds to open the connection.

    Example:
        >>> import agentgym
        >>> env = agentgym.make("openenv:http://127.0.0.1:8000")  # doctest: +SKIP
        >>> messages, info = await env.reset(seed=3)                # doctest: +SKIP
    """

    spec: Any = None

    def __init__(self, url: str, timeout: float = 300.0, connect_timeout: float = 30.0) -> None:
        if not isinstance(url, str) or not url.startswith(SCHEMES) or "://" == url[-3:]:
            raise ConfigError(f"url must be an OpenEnv server's address such as "
                              f"'http://127.0.0.1:8000', got {url!r}")
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name} must be a number of seconds > 0, got {value!r}")
        try:  # the client's package: a missing extra is the caller's to fix, not a fault
            from openenv.core.generic_client import GenericEnvClient
        except ImportError:
            raise MissingExtraError("openenv-core", "openenv", "OpenEnvEnv") from None
        self._client_cls = GenericEnvClient
        self.url = url.rstrip("/")
        self.timeout, self.connect_timeout = float(timeout), float(connect_timeout)
        self.tools: tuple[ToolSpec, ...] = ()
        self.prose_is_action = False
        self.max_turns: int | None = None
        self._client: Any = None
        self._native: bool | None = None  # an agentgym server? (known after the first reset)
        self._schema: dict[str, Any] | None = None  # a foreign server's action schema
        self._text_field: str | None = None
        self._needs_reset = True
        self._closed = False

    # -- the contract -----------------------------------------------------------------
    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode on the server with ``seed`` and ``options``."""
        self._check_open("reset")
        data: dict[str, Any] = {}
        if seed is not None:
            data["seed"] = seed
        if options is not None:
            data["options"] = options
        result = await self._call("reset", lambda client: client.reset(**data))
        obs = result.observation if isinstance(result.observation, Mapping) else {}
        self._native = _is_agentgym(obs)
        if self._native:
            messages = [Message.from_dict(m) for m in obs["messages"]]
            info = dict(obs.get("info") or {})
            self.tools = tuple(ToolSpec.from_dict(t) for t in obs.get("tools") or ())
            self.prose_is_action = obs.get("prose_is_action") is True
            limit = obs.get("max_turns")
            self.max_turns = limit if isinstance(limit, int) and limit > 0 else None
        else:
            await self._load_schema()
            messages, info = [Message("user", _render(obs))], {}
        self._needs_reset = bool(result.done)
        return messages, info

    async def step(self, action: Message) -> StepResult:
        """Send one assistant turn; see the module docstring for a foreign server's mapping."""
        self._check_open("step")
        if self._needs_reset:
            raise ResetNeeded("OpenEnvEnv.step() was called before reset() or after the "
                              "episode ended; call `await env.reset(seed=...)` first")
        if not isinstance(action, Message):
            raise TypeError(f"step() expects an agentgym.Message, got {type(action).__name__}; "
                            'wrap text as Message("assistant", text)')
        if self._native:
            payload = {"content": action.content,
                       "tool_calls": [c.to_dict() for c in action.tool_calls]}
        else:
            payload, mistake = self._foreign_action(action)
            if mistake is not None:
                return mistake
        result = await self._call("step", lambda client: client.step(payload))
        obs = result.observation if isinstance(result.observation, Mapping) else {}
        reward = None if result.reward is None else float(result.reward)
        if self._native:
            out = StepResult(tuple(Message.from_dict(m) for m in obs.get("messages") or ()),
                             reward, bool(obs.get("terminated")), bool(obs.get("truncated")),
                             dict(obs.get("info") or {}))
        else:
            call = action.tool_calls[0] if action.tool_calls else None
            text = _render(obs)
            reply = (Message("tool", text, tool_call_id=call.id, name=ACT_TOOL) if call
                     else Message("user", text))
            out = StepResult((reply,), reward, terminated=bool(result.done))
        if out.done:
            self._needs_reset = True
        return out

    async def aclose(self) -> None:
        """Close the connection (the server ends the session); idempotent."""
        self._closed = True
        await self._drop()

    async def __aenter__(self) -> OpenEnvEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<OpenEnvEnv {self.url}>"

    # -- the connection ---------------------------------------------------------------
    async def _call(self, what: str, request: Any) -> Any:
        """Run one request on the connection; any failure drops it and is an OpenEnvFault."""
        try:
            if self._client is None:
                client = self._client_cls(self.url, connect_timeout_s=self.connect_timeout,
                                          message_timeout_s=self.timeout)
                await client.connect()
                self._client = client
            return await request(self._client)
        except Exception as exc:
            await self._drop()
            self._needs_reset = True
            raise OpenEnvFault(f"openenv server {self.url}: {what} failed: "
                               f"{type(exc).__name__}: {exc}") from exc

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # the connection is already gone; nothing is left to free
                pass

    def _check_open(self, method: str) -> None:
        if self._closed:
            raise EnvClosedError(f"OpenEnvEnv.{method}() was called after aclose(); make a new "
                                 "env with agentgym.make(...)")

    # -- a server that is not agentgym's ---------------------------------------------
    async def _load_schema(self) -> None:
        if self._schema is not None:
            return
        http = self.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout)
            async with aiohttp.ClientSession(timeout=timeout) as session, \
                    session.get(f"{http}/schema") as response:
                response.raise_for_status()
                schema = dict((await response.json())["action"])
        except Exception as exc:
            raise OpenEnvFault(f"openenv server {self.url}: GET /schema failed: "
                               f"{type(exc).__name__}: {exc}") from exc
        properties = dict(schema.get("properties") or {})
        properties.pop("metadata", None)  # OpenEnv's own bookkeeping field, not the agent's
        schema["properties"] = properties
        schema.pop("title", None)
        self._schema = schema
        required = [k for k in schema.get("required") or () if k in properties]
        texts = [k for k in required if properties[k].get("type") == "string"]
        self._text_field = texts[0] if len(required) == 1 and texts else None
        self.prose_is_action = self._text_field is not None
        self.tools = (ToolSpec(ACT_TOOL, "Take one action in the environment; the parameters "
                               "are the environment's action.", schema),)

    def _foreign_action(self, action: Message) -> tuple[dict[str, Any], StepResult | None]:
        """The action payload for a foreign server, or the agent's mistake as a result."""
        assert self._schema is not None  # loaded by reset
        calls = action.tool_calls
        if not calls:
            if self._text_field is not None:
                return {self._text_field: action.content}, None
            return {}, _mistake(None, f"call the {ACT_TOOL} tool with the action as its "
                                      "arguments")
        call: ToolCall = calls[0]
        if len(calls) > 1 or call.name != ACT_TOOL:
            names = [c.name for c in calls]
            return {}, _mistake(call, f"make exactly one call of {ACT_TOOL}, got {names!r}")
        if (problem := call.problem()) is not None:
            return {}, _mistake(call, problem)
        try:
            jsonschema.validate(dict(call.arguments), self._schema)
        except jsonschema.ValidationError as exc:
            return {}, _mistake(call, f"the action does not match the schema: {exc.message}")
        return dict(call.arguments), None


def _is_agentgym(obs: Mapping[str, Any]) -> bool:
    """Whether an observation is an agentgym server's (its fields, by type)."""
    return (isinstance(obs.get("messages"), list) and isinstance(obs.get("info"), dict)
            and isinstance(obs.get("terminated"), bool) and isinstance(obs.get("truncated"), bool))


def _render(obs: Mapping[str, Any]) -> str:
    """A foreign observation as the model reads it: its fields as JSON."""
    return json.dumps(dict(obs), ensure_ascii=False, default=str)


def _mistake(call: ToolCall | None, text: str) -> StepResult:
    reply = (Message("tool", f"error: {text}", tool_call_id=str(call.id), name=ACT_TOOL)
             if call is not None else Message("user", f"error: {text}"))
    return StepResult((reply,), None, info={"valid": False})
