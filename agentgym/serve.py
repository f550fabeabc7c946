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

**Hostile and careless clients** (limits in :class:`ServeLimits`):

- A client that disconnects cancels its request at once (aiohttp's handler cancellation):
  the policy drops the row at its next token and the row is free for the next request.
- Admission is first come, first served, and nothing waits behind a long completion: with
  the transformers backend a request joins the batch being decoded at the next token while
  the batch has fewer than ``max_batch_size`` rows (see :mod:`agentgym.policies.hf`). At most
  ``max_requests`` requests are in progress at once; the next one is answered 429 at once.
- Every client mistake is a 4xx with an OpenAI-style body whose ``param`` names the field:
  malformed or over-deep JSON (``max_depth``), lone surrogates, a body its
  ``Content-Encoding`` does not describe, wrong types, out-of-range values, a prompt longer
  than the model's context. A 5xx means a fault of the server or the policy; only those are
  logged with a traceback.
- A connection that sends no complete request head within ``idle_timeout_s`` (or stays idle
  that long between requests), a body that takes longer than ``body_timeout_s`` to arrive
  and a response its client does not read within ``write_timeout_s`` are closed.
- JSON parsing of large bodies and tokenization of long prompts run in worker threads, so
  ``/health`` and other requests keep being answered meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from agentgym.errors import ConfigError
from agentgym.parsing import parse_tool_calls
from agentgym.policies.base import Completion, GenerationRequest, Policy
from agentgym.serve_request import (
    BadRequest,
    check_tree,
    common,
    message,
    parse_json,
    prompt,
    sampling,
    tool_choice,
    tools,
)
from agentgym.types import ToolCall

__all__ = ["BadRequest", "ServeLimits", "create_app", "serve"]

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")
INLINE_BYTES = 256 * 2**10
"""Bodies and text prompts larger than this are parsed or tokenized in a worker thread."""


@dataclass(frozen=True)
class ServeLimits:
    """What the server accepts from a client, and how long it waits for one.

    Attributes:
        max_body_bytes: Largest request body (after decompression); larger is 413. A policy
            that knows how much text its context holds (``prompt_char_limit``) lowers it to
            what such a prompt can take in JSON (:func:`body_limit`).
        body_timeout_s: Time for the whole body to arrive once the head has; then 408.
        idle_timeout_s: Time a connection may take to send a complete request head, and may
            stay idle between requests, before it is closed.
        write_timeout_s: Time a client may take to read its response before the connection
            is closed.
        max_depth: Deepest JSON nesting accepted, in the body and in tool-call arguments.
        max_requests: Most requests in progress at once (queued or decoding); more get 429.
    """

    max_body_bytes: int = 64 * 2**20  # long multi-turn conversations exceed aiohttp's 1 MiB
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 30.0
    write_timeout_s: float = 60.0
    max_depth: int = 64
    max_requests: int = 256

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_depth", "max_requests"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"ServeLimits.{name} must be a positive int, got {value!r}")
        for name in ("body_timeout_s", "idle_timeout_s", "write_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise ConfigError(f"ServeLimits.{name} must be a positive number of seconds, "
                                  f"got {value!r}")


MAX_BODY = ServeLimits().max_body_bytes


def body_limit(policy: Policy, limits: ServeLimits) -> int:
    r"""The largest body worth reading for ``policy``: at most ``limits.max_body_bytes``.

    A prompt of ``prompt_char_limit`` characters takes at most 12 bytes a character in JSON
    (a character beyond the BMP escaped as a surrogate pair, ``\ud83d\ude00``); a body larger
    than that plus 1 MiB of other fields cannot fit the model's context, so it is refused
    (413) before it is read or parsed.
    """
    chars = getattr(policy, "prompt_char_limit", None)
    if isinstance(chars, int) and not isinstance(chars, bool) and chars > 0:
        return min(limits.max_body_bytes, 12 * chars + 2**20)
    return limits.max_body_bytes


_LIMITS = web.AppKey("limits", ServeLimits)


def create_app(policy: Policy, model_name: str, limits: ServeLimits | None = None
               ) -> web.Application:
    """An aiohttp app that serves ``policy`` under the name ``model_name``.

    Args:
        policy: Any policy; text prompts to ``/v1/completions`` need ``policy.tokenizer``.
        model_name: The id listed by ``/v1/models``; requests naming another model get 404.
        limits: What clients may send (default :class:`ServeLimits`).

    Returns:
        The application. Run it with :func:`serve`, which also closes idle connections and
        cancels the requests of clients that disconnect (``aiohttp.web.AppRunner`` needs
        ``handler_cancellation=True`` and ``keepalive_timeout`` for that).
    """
    limits = limits or ServeLimits()
    routes = _Routes(policy, model_name, limits)
    app = web.Application(client_max_size=routes.max_body, middlewares=[_errors])
    app[_LIMITS] = limits
    app.add_routes([
        web.get("/v1/models", routes.models),
        web.get("/health", routes.health),
        web.post("/v1/chat/completions", routes.chat),
        web.post("/v1/completions", routes.completions),
    ])
    app.on_cleanup.append(routes.close)
    return app


async def serve(policy: Policy, host: str = "127.0.0.1", port: int = 8000, *,
                model_name: str = "agentgym",
                on_ready: Callable[[str], None] | None = None,
                limits: ServeLimits | None = None) -> None:
    """Serve ``policy`` until cancelled (Ctrl-C under ``asyncio.run``).

    The caller owns ``policy`` and closes it afterwards.

    Args:
        policy: The policy to serve.
        host: Interface to bind; the default answers only this machine.
        port: TCP port; 0 picks a free one.
        model_name: The model id clients send.
        on_ready: Called with the base URL (``http://host:port/v1``) once the port is open.
        limits: What clients may send (default :class:`ServeLimits`).
    """
    limits = limits or ServeLimits()
    runner = web.AppRunner(create_app(policy, model_name, limits), access_log=None,
                           handler_cancellation=True, keepalive_timeout=limits.idle_timeout_s,
                           logger=_http_log)
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


class _ClientFaults(logging.Filter):
    """Log a client's malformed request (bad HTTP, an unknown encoding) as one line.

    aiohttp logs it with a traceback, as if the server had failed.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError | web.RequestPayloadError | ConnectionError):
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}".replace(
                "\n", " ")
            record.args, record.exc_info, record.exc_text = (), None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_http_log = logging.getLogger(f"{__name__}.http")
_http_log.addFilter(_ClientFaults())


def _error(status: int, message: str, kind: str, param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param,
                                        "code": status}}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes an OpenAI-style error body; slow readers are cut off."""
    try:
        response = await handler(request)
    except BadRequest as exc:
        response = _error(exc.status, str(exc), exc.kind, exc.param)
        if exc.status in (408, 413, 429):  # the body was not read: the connection is spent
            response.force_close()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _error(exc.status, f"{exc.reason}: {request.method} {request.path}; this "
                          "server answers GET /v1/models, GET /health, POST "
                          "/v1/chat/completions and POST /v1/completions",
                          "invalid_request_error")
    except Exception as exc:
        log.exception("policy failed on %s", request.path)
        response = _error(500, f"the policy failed: {type(exc).__name__}: {exc}",
                          "server_error")
    # Write here, under a deadline: aiohttp would wait for a client that never reads.
    timeout = request.app[_LIMITS].write_timeout_s
    try:
        async with asyncio.timeout(timeout):
            await response.prepare(request)
            await response.write_eof()
    except TimeoutError:
        log.info("closed a connection whose client did not read its response in %s s",
                 timeout)
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError from None
    if response.status == 408:  # a client this slow gets no lingering read of its body
        request.protocol.force_close()
    return response


class _Routes:
    def __init__(self, policy: Policy, model_name: str, limits: ServeLimits) -> None:
        self.policy = policy
        self.model_name = model_name
        self.limits = limits
        self.in_progress = 0
        self.max_body = body_limit(policy, limits)
        # Parsing and tokenizing big inputs: off the event loop, two at a time at most.
        self._executor = ThreadPoolExecutor(2, thread_name_prefix="agentgym-serve")

    async def close(self, app: web.Application) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentgym"}]})

    @contextlib.asynccontextmanager
    async def _admitted(self) -> AsyncIterator[None]:
        if self.in_progress >= self.limits.max_requests:
            raise BadRequest(f"the server has {self.in_progress} requests in progress, its "
                             "limit (ServeLimits.max_requests); retry later", status=429,
                             kind="rate_limit_error")
        self.in_progress += 1
        try:
            yield
        finally:
            self.in_progress -= 1

    async def chat(self, request: web.Request) -> web.Response:
        async with self._admitted():
            raw = await self._read(request)
            body, req = await self._cpu(len(raw), self._chat_request, raw)
            done = await self._generate(req)
        calls: tuple[ToolCall, ...] = done.tool_calls
        if not calls and req.tools and body.get("tool_choice") != "none":
            calls = parse_tool_calls(done.text).calls
        message_out: dict[str, Any] = {"role": "assistant", "content": done.text}
        if calls:
            message_out["tool_calls"] = [_openai_call(c) for c in calls]
        finish = "tool_calls" if calls and done.finish_reason == "stop" else done.finish_reason
        logprobs = None
        if body.get("logprobs") and done.logprobs:
            logprobs = {"content": [
                {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                for t, lp in zip(self._token_strings(done), done.logprobs, strict=True)]}
        choice = {"index": 0, "message": message_out, "logprobs": logprobs,
                  "finish_reason": finish, **_ids(done)}
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": _usage(done), "prompt_token_ids": list(done.prompt_ids) or None})

    def _chat_request(self, raw: bytes) -> tuple[dict[str, Any], GenerationRequest]:
        body = self._body(raw)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list of messages",
                             param="messages")
        if not isinstance(body.get("logprobs", False), bool | None):
            raise BadRequest("'logprobs' must be a boolean", param="logprobs")
        offered = tools(body.get("tools"))
        tool_choice(body)
        depth = self.limits.max_depth
        return body, GenerationRequest(tuple(message(m, i, depth) for i, m in enumerate(messages)),
                                       offered, params=sampling(body))

    async def completions(self, request: web.Request) -> web.Response:
        async with self._admitted():
            raw = await self._read(request)
            body, text_or_ids = await self._cpu(len(raw), self._completion_request, raw)
            prompt_ids = text_or_ids if isinstance(text_or_ids, tuple) else \
                await self._tokenize(text_or_ids, body)
            done = await self._generate(GenerationRequest(prompt_ids=prompt_ids,
                                                          params=sampling(body)))
        if not done.prompt_ids:
            done = replace(done, prompt_ids=prompt_ids)
        logprobs = None
        if body.get("logprobs") not in (None, False) and done.logprobs:
            tokens = self._token_strings(done)
            offsets = [0]
            for t in tokens[:-1]:
                offsets.append(offsets[-1] + len(t))
            logprobs = {"tokens": tokens, "token_logprobs": list(done.logprobs),
                        "top_logprobs": None, "text_offset": offsets}
        choice = {"index": 0, "text": done.text, "logprobs": logprobs,
                  "finish_reason": done.finish_reason,
                  "prompt_token_ids": list(done.prompt_ids), **_ids(done)}
        return web.json_response({
            "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": _usage(done)})

    def _completion_request(self, raw: bytes) -> tuple[dict[str, Any], str | tuple[int, ...]]:
        body = self._body(raw)
        for key in ("echo", "suffix"):
            if body.get(key):
                raise BadRequest(f"{key!r} is not supported by this server", param=key)
        lp = body.get("logprobs")
        if lp is not None and (not isinstance(lp, int) or not 0 <= lp <= 20):
            raise BadRequest("'logprobs' must be an integer in [0, 20] (or a boolean)",
                             param="logprobs")
        if not isinstance(body.get("add_special_tokens", True), bool):
            raise BadRequest("'add_special_tokens' must be a boolean",
                             param="add_special_tokens")
        sampling(body)  # fail here, before a long prompt is tokenized
        return body, prompt(body)

    async def _tokenize(self, text: str, body: dict[str, Any]) -> tuple[int, ...]:
        tokenizer = getattr(self.policy, "tokenizer", None)
        if tokenizer is None:
            raise BadRequest("a text prompt needs the policy's tokenizer, and this policy "
                             "has none; send 'prompt' as a list of token ids", param="prompt")
        limit = getattr(self.policy, "prompt_char_limit", None)
        if isinstance(limit, int) and len(text) > limit:
            raise BadRequest(f"'prompt' has {len(text)} characters, more than the model's "
                             "context can hold; shorten it", param="prompt")
        special = body.get("add_special_tokens", True)
        ids = await self._cpu(len(text), lambda: tuple(tokenizer.encode(
            text, add_special_tokens=special)))
        if not ids:
            raise BadRequest("'prompt' is empty after tokenization", param="prompt")
        return ids

    def _body(self, raw: bytes) -> dict[str, Any]:
        body = parse_json(raw)
        check_tree(body, self.limits.max_depth)
        return common(body, self.model_name)

    async def _read(self, request: web.Request) -> bytes:
        """The body, within the size and time limits; a body its encoding does not fit is 400."""
        limit = self.max_body
        why = " (more cannot fit the model's context)" if limit < self.limits.max_body_bytes \
            else ""
        if request.content_length is not None and request.content_length > limit:
            raise BadRequest(f"the request body has {request.content_length} bytes; this "
                             f"server accepts at most {limit}{why}", status=413)
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                return await request.read()
        except TimeoutError:
            raise BadRequest(f"the request body did not arrive within "
                             f"{self.limits.body_timeout_s:g} s", status=408) from None
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"the request body is larger than {limit} bytes (after "
                             f"decompression), the most this server accepts{why}", status=413
                             ) from None
        except web.RequestPayloadError as exc:
            encoding = request.headers.get("Content-Encoding")
            if encoding:
                raise BadRequest(f"the request body is not {encoding} data as its "
                                 f"Content-Encoding header says ({exc}); send the body as "
                                 "declared or drop the header", param="Content-Encoding"
                                 ) from None
            raise BadRequest(f"the request body could not be read: {exc}") from None

    async def _cpu(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: here when ``size`` is small, else in a worker thread."""
        if size <= INLINE_BYTES:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _generate(self, request: GenerationRequest) -> Completion:
        try:
            out = await self.policy.generate([request])
        except ConfigError as exc:  # the request does not fit the model: too long, bad ids
            raise BadRequest(str(exc), param="prompt" if request.prompt_ids else "messages"
                             ) from None
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


def _openai_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {
        "name": call.name, "arguments": json.dumps(dict(call.arguments), ensure_ascii=False)}}
