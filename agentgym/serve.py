"""Serve any :class:`~agentgym.policies.base.Policy` over HTTP with the OpenAI API.

Routes: ``GET /v1/models``, ``GET /health``, ``POST /v1/chat/completions`` and
``POST /v1/completions`` (non-streaming, one choice per request). Besides the OpenAI schema
every answer carries the exact token ids, named as vLLM names them (``prompt_token_ids``,
per-choice ``token_ids``), so :class:`~agentgym.policies.openai.OpenAIPolicy` records
token-exact trajectories from this server.

Tool calls: when a chat request offers tools, the reply's ``content`` is the raw text the
model wrote and ``tool_calls`` holds the calls :func:`agentgym.parsing.parse_tool_calls` read
from it (``finish_reason`` is then ``tool_calls``). A client that echoes such a message back
(content with the calls in it, plus ``tool_calls``) would show the model its calls twice, so
an incoming assistant message whose content parses to exactly its ``tool_calls`` keeps only
the content: the next prompt then holds the model's own text, token for token.

Not supported (answered 400): ``n`` > 1, ``stream``, ``echo``, ``best_of`` > 1, batched
prompts. ``top_logprobs`` comes back empty: a policy records only the sampled token's log-prob.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from aiohttp import web

from agentgym.errors import ConfigError
from agentgym.parsing import parse_tool_calls
from agentgym.policies.base import Completion, GenerationRequest, Policy, SamplingParams
from agentgym.types import ROLES, Message, ToolCall, ToolSpec

log = logging.getLogger(__name__)
MAX_BODY = 64 * 2**20  # long multi-turn conversations exceed aiohttp's 1 MiB default
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadRequest(Exception):
    """A request the server cannot serve; answered with an OpenAI-style error body."""

    def __init__(self, message: str, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def create_app(policy: Policy, model_name: str) -> web.Application:
    """An aiohttp app that serves ``policy`` under the name ``model_name``.

    Args:
        policy: Any policy; text prompts to ``/v1/completions`` need ``policy.tokenizer``.
        model_name: The id listed by ``/v1/models``; requests naming another model get 404.

    Returns:
        The application (run it with :func:`serve` or ``aiohttp.web.AppRunner``).
    """
    routes = _Routes(policy, model_name)
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_errors])
    app.add_routes([
        web.get("/v1/models", routes.models),
        web.get("/health", routes.health),
        web.post("/v1/chat/completions", routes.chat),
        web.post("/v1/completions", routes.completions),
    ])
    return app


async def serve(policy: Policy, host: str = "127.0.0.1", port: int = 8000, *,
                model_name: str = "agentgym",
                on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``policy`` until cancelled (Ctrl-C under ``asyncio.run``).

    The caller owns ``policy`` and closes it afterwards.

    Args:
        policy: The policy to serve.
        host: Interface to bind; the default answers only this machine.
        port: TCP port; 0 picks a free one.
        model_name: The model id clients send.
        on_ready: Called with the base URL (``http://host:port/v1``) once the port is open.
    """
    runner = web.AppRunner(create_app(policy, model_name), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        if on_ready is not None:
            on_ready(f"http://{host}:{bound}/v1")
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}},
                             status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes an OpenAI-style error body."""
    try:
        return await handler(request)
    except BadRequest as exc:
        return _error(exc.status, str(exc), exc.kind)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, f"{exc.reason}: {request.method} {request.path}; this "
                      "server answers GET /v1/models, POST /v1/chat/completions and POST "
                      "/v1/completions", "invalid_request_error")
    except Exception as exc:
        log.exception("policy failed on %s", request.path)
        return _error(500, f"the policy failed: {type(exc).__name__}: {exc}", "server_error")


class _Routes:
    def __init__(self, policy: Policy, model_name: str) -> None:
        self.policy = policy
        self.model_name = model_name

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentgym"}]})

    async def chat(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list of messages")
        tools = _tools(body.get("tools"))
        req = GenerationRequest(tuple(_message(m, i) for i, m in enumerate(messages)), tools,
                                params=_sampling(body))
        done = await self._generate(req)
        calls = done.tool_calls
        if not calls and tools and body.get("tool_choice") != "none":
            calls = parse_tool_calls(done.text).calls
        message: dict[str, Any] = {"role": "assistant", "content": done.text}
        if calls:
            message["tool_calls"] = [_openai_call(c) for c in calls]
        finish = "tool_calls" if calls and done.finish_reason == "stop" else done.finish_reason
        logprobs = None
        if body.get("logprobs") and done.logprobs:
            logprobs = {"content": [
                {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                for t, lp in zip(self._token_strings(done), done.logprobs, strict=True)]}
        choice = {"index": 0, "message": message, "logprobs": logprobs,
                  "finish_reason": finish, **_ids(done)}
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": _usage(done), "prompt_token_ids": list(done.prompt_ids) or None})

    async def completions(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        for key in ("echo", "suffix"):
            if body.get(key):
                raise BadRequest(f"{key!r} is not supported by this server")
        prompt_ids = self._prompt_ids(body)
        done = await self._generate(GenerationRequest(prompt_ids=prompt_ids,
                                                      params=_sampling(body)))
        if not done.prompt_ids:
            done = replace(done, prompt_ids=prompt_ids)
        logprobs = None
        if body.get("logprobs") not in (None, False) and done.logprobs:
            tokens = self._token_strings(done)
            offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
            logprobs = {"tokens": tokens, "token_logprobs": list(done.logprobs),
                        "top_logprobs": None, "text_offset": offsets}
        choice = {"index": 0, "text": done.text, "logprobs": logprobs,
                  "finish_reason": done.finish_reason,
                  "prompt_token_ids": list(done.prompt_ids), **_ids(done)}
        return web.json_response({
            "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": _usage(done)})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest(f"the request body must be a JSON object, got "
                             f"{type(body).__name__}")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise BadRequest(f"the model {model!r} does not exist; this server serves "
                             f"{self.model_name!r}", status=404)
        if body.get("n", 1) != 1:
            raise BadRequest(f"n must be 1 (got {body['n']!r}): this server samples one "
                             "completion per request; send n requests instead")
        if body.get("best_of") not in (None, 1):
            raise BadRequest("best_of is not supported; send several requests instead")
        if body.get("stream"):
            raise BadRequest("streaming is not supported; send 'stream': false")
        return body

    def _prompt_ids(self, body: Mapping[str, Any]) -> tuple[int, ...]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one, as OpenAI clients often send it
        if isinstance(prompt, str):
            tokenizer = getattr(self.policy, "tokenizer", None)
            if tokenizer is None:
                raise BadRequest("a text prompt needs the policy's tokenizer, and this policy "
                                 "has none; send 'prompt' as a list of token ids")
            ids = tokenizer.encode(prompt, add_special_tokens=bool(
                body.get("add_special_tokens", True)))
        elif isinstance(prompt, list) and all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            ids = prompt
        else:
            raise BadRequest("'prompt' must be a string or a list of token ids (one prompt; "
                             f"batches are not supported), got {_kind(prompt)}")
        if not ids:
            raise BadRequest("'prompt' is empty")
        return tuple(ids)

    async def _generate(self, request: GenerationRequest) -> Completion:
        try:
            out = await self.policy.generate([request])
        except ConfigError as exc:  # the request does not fit the model: too long, bad ids
            raise BadRequest(str(exc)) from None
        if len(out) != 1:
            raise RuntimeError(f"the policy returned {len(out)} completions for 1 request")
        return out[0]

    def _token_strings(self, done: Completion) -> list[str]:
        """One string per sampled token; ``token_id:<id>`` when there is no tokenizer."""
        tokenizer = getattr(self.policy, "tokenizer", None)
        if not done.completion_ids:
            return [""] * len(done.logprobs)
        if tokenizer is None:
            return [f"token_id:{i}" for i in done.completion_ids]
        return [tokenizer.decode([i]) for i in done.completion_ids]


def _ids(done: Completion) -> dict[str, Any]:
    out: dict[str, Any] = {"token_ids": list(done.completion_ids) or None}
    if done.policy_version is not None:
        out["policy_version"] = done.policy_version
    return out


def _usage(done: Completion) -> dict[str, int]:
    p, c = len(done.prompt_ids), len(done.completion_ids)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _kind(value: object) -> str:
    return "nothing" if value is None else type(value).__name__


def _sampling(body: Mapping[str, Any]) -> SamplingParams:
    """SamplingParams from the request; defaults are SamplingParams' own."""
    kwargs: dict[str, Any] = {}
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None:
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise BadRequest(f"{key!r} must be a number, got {_kind(value)}")
            kwargs[key] = float(value)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise BadRequest(f"'max_tokens' must be an integer, got {_kind(max_tokens)}")
        kwargs["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise BadRequest("'stop' must be a string or a list of strings")
        kwargs["stop"] = tuple(stop)
    seed = body.get("seed")
    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise BadRequest(f"'seed' must be an integer, got {_kind(seed)}")
        kwargs["seed"] = seed
    try:
        return SamplingParams(**kwargs)
    except ConfigError as exc:
        raise BadRequest(str(exc)) from None


def _tools(raw: object) -> tuple[ToolSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest(f"'tools' must be a list, got {_kind(raw)}")
    try:
        return tuple(ToolSpec.from_dict(t) for t in raw)
    except (ValueError, TypeError, AttributeError) as exc:
        raise BadRequest(f"'tools' holds a malformed tool: {exc}") from None


def _message(item: object, i: int) -> Message:
    if not isinstance(item, Mapping):
        raise BadRequest(f"messages[{i}] must be an object, got {_kind(item)}")
    role = "system" if item.get("role") == "developer" else item.get("role")
    if role not in ROLES:
        raise BadRequest(f"messages[{i}].role must be one of {ROLES}, got {role!r}")
    content = item.get("content")
    if isinstance(content, list):  # content parts: only text ones are understood
        if not all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
            raise BadRequest(f"messages[{i}].content holds non-text parts; send text only")
        content = "".join(str(p.get("text", "")) for p in content)
    if content is not None and not isinstance(content, str):
        raise BadRequest(f"messages[{i}].content must be a string, got {_kind(content)}")
    raw_calls = item.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise BadRequest(f"messages[{i}].tool_calls must be a list")
    calls = tuple(_tool_call(c, f"messages[{i}].tool_calls[{j}]")
                  for j, c in enumerate(raw_calls))
    text = content or ""
    if calls and text:
        echoed = parse_tool_calls(text).calls
        if [(c.name, dict(c.arguments)) for c in echoed] == [
                (c.name, dict(c.arguments)) for c in calls]:
            calls = ()  # the content already holds these calls; see the module docstring
    return Message(role, text, calls, item.get("tool_call_id"), item.get("name"))


def _tool_call(raw: object, where: str) -> ToolCall:
    fn = raw.get("function") if isinstance(raw, Mapping) else None
    if not isinstance(raw, Mapping) or not isinstance(fn, Mapping) \
            or not isinstance(fn.get("name"), str):
        raise BadRequest(f"{where} needs function.name")
    args = fn.get("arguments") or {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            raise BadRequest(f"{where}.function.arguments is not valid JSON") from None
    if not isinstance(args, Mapping):
        raise BadRequest(f"{where}.function.arguments must be a JSON object")
    return ToolCall(str(raw.get("id") or "call_0"), fn["name"], dict(args))


def _openai_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {
        "name": call.name, "arguments": json.dumps(dict(call.arguments), ensure_ascii=False)}}
