"""Serve any :class:`~agentgym.policies.base.Policy` over HTTP with the OpenAI API.

Routes: ``GET /v1/models``, ``GET /health``, ``POST /v1/chat/completions`` and
``POST /v1/completions``, whole or streamed (``stream: true``: server-sent events as the
OpenAI API sends them, see :mod:`agentgym.serve_reply`), with ``n`` choices of one prompt
(seeded ``seed``, ``seed + 1``, ...), ``stop``, ``seed`` and ``top_logprobs`` (chat:
``logprobs: true, top_logprobs: k``; completions: ``logprobs: k``; alternatives from the
distribution the behaviour log-prob is taken from). Besides the OpenAI schema every answer,
and every streamed chunk, carries the exact token ids, named as vLLM names them
(``prompt_token_ids``, per-choice ``token_ids``), so
:class:`~agentgym.policies.openai.OpenAIPolicy` records token-exact trajectories from this
server.

Tool calls: when a chat request offers tools, the reply's ``content`` is the raw text the
model wrote and ``tool_calls`` holds the calls :func:`agentgym.parsing.parse_tool_calls` read
from it (``finish_reason`` is then ``tool_calls``). A client that echoes such a message back
(content with the calls in it, plus ``tool_calls``) would show the model its calls twice, so
an incoming assistant message whose content parses to exactly its ``tool_calls`` keeps only
the content: the next prompt then holds the model's own text, token for token.

Not supported (answered 400): ``echo``, ``suffix``, ``best_of`` > 1, batched prompts. A stop
string stays in the text (the text is the decode of the sampled ids). A policy without the
``on_token`` hook (only the transformers backend has it) streams its whole answer when it
ends and reports no alternatives.

**Hostile and careless clients** (limits in :class:`ServeLimits`):

- A client that disconnects cancels its request at once (aiohttp's handler cancellation),
  streamed or not: the policy drops the rows at their next token and they are free for the
  next request.
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
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from agentgym.errors import ConfigError
from agentgym.policies.base import Completion, GenerationRequest, Policy
from agentgym.serve_reply import Reply, TokenFeed, stream
from agentgym.serve_request import (
    BadRequest,
    check_tree,
    choices,
    common,
    message,
    parse_json,
    prompt,
    sampling,
    tool_choice,
    tools,
)

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
    if response.prepared:  # a stream, written by its handler under the same deadline
        return response
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

    async def chat(self, request: web.Request) -> web.StreamResponse:
        async with self._admitted():
            raw = await self._read(request)
            body, req = await self._cpu(len(raw), self._chat_request, raw)
            reply = Reply("chat", self.model_name, getattr(self.policy, "tokenizer", None),
                          choices(body, chat=True), logprobs=bool(body.get("logprobs")),
                          parse_calls=bool(req.tools) and body.get("tool_choice") != "none")
            return await self._answer(request, req, reply)

    async def _answer(self, request: web.Request, req: GenerationRequest, reply: Reply
                      ) -> web.StreamResponse:
        """Generate the request's choices and answer them, whole or streamed."""
        want = reply.choices
        feed = TokenFeed(asyncio.get_running_loop()) \
            if want.stream or want.top_logprobs else None
        requests = []
        for i in range(want.n):
            params = replace(req.params, top_logprobs=want.top_logprobs)
            if params.seed is not None and i:  # choices of one seeded request differ
                seed = params.seed + i
                params = replace(params, seed=seed - 2**64 if seed >= 2**64 else seed)
            requests.append(replace(req, params=params,
                                    on_token=feed.hook(i) if feed else None))
        task = asyncio.ensure_future(self._generate(requests))
        if want.stream:
            assert feed is not None
            return await stream(request, reply, feed, task, self.limits.write_timeout_s)
        try:
            done = await task
        finally:
            task.cancel()
        if req.prompt_ids:
            done = [d if d.prompt_ids else replace(d, prompt_ids=req.prompt_ids) for d in done]
        tops: list[list[Any]] = [[] for _ in done]
        for index, token in feed.drain() if feed else ():
            tops[index].append(token.top)
        return web.json_response(reply.body(done, tops))

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

    async def completions(self, request: web.Request) -> web.StreamResponse:
        async with self._admitted():
            raw = await self._read(request)
            body, text_or_ids = await self._cpu(len(raw), self._completion_request, raw)
            prompt_ids = text_or_ids if isinstance(text_or_ids, tuple) else \
                await self._tokenize(text_or_ids, body)
            reply = Reply("text", self.model_name, getattr(self.policy, "tokenizer", None),
                          choices(body, chat=False),
                          logprobs=body.get("logprobs") is not None
                          and body.get("logprobs") is not False)
            return await self._answer(
                request, GenerationRequest(prompt_ids=prompt_ids, params=sampling(body)), reply)

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

    async def _generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        try:
            out = await self.policy.generate(requests)
        except ConfigError as exc:  # the request does not fit the model: too long, bad ids
            raise BadRequest(str(exc), param="prompt" if requests[0].prompt_ids
                             else "messages") from None
        if len(out) != len(requests):
            raise RuntimeError(f"the policy returned {len(out)} completions for "
                               f"{len(requests)} requests")
        return out
