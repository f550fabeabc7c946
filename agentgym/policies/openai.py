"""A policy backed by any OpenAI-compatible server: vLLM, SGLang, ``agentgym serve``, APIs.

Two modes:

- ``chat`` posts the conversation to ``/chat/completions``; the server renders it with its
  chat template and may parse tool calls itself. A request's ``prompt_ids`` are not sent:
  the completion's ``prompt_ids`` are the ones the server reports it used.
- ``completions`` posts token ids to ``/completions`` (vLLM and ``agentgym serve`` accept a
  list of ids as ``prompt``): the request's ``prompt_ids`` when the caller built them,
  otherwise the conversation rendered and tokenized here with ``tokenizer``. Sending ids, not
  text, keeps the prompt token-exact (no second BOS, no re-tokenization on the server).

Exact token ids come back when the server returns them: vLLM (>= 0.10.2) does when asked with
``return_token_ids: true`` (sent by default, see ``token_ids``), in ``prompt_token_ids`` and
per-choice ``token_ids``; ``agentgym serve`` always does. Without them a completion still has
its text and log-probs, but :meth:`Completion.tokens` is None and the step cannot be trained on.

Faults are retried with exponential backoff and jitter (429, 408, 5xx, timeouts, dropped
connections; ``Retry-After`` is honoured); other 4xx answers and garbage bodies raise at once.
Everything raised is a :class:`BackendError`, which the rollout engine turns into an error
trajectory.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aiohttp

from agentgym.errors import AgentGymError, ConfigError, did_you_mean
from agentgym.policies.base import Completion, FinishReason, GenerationRequest
from agentgym.prompting import render_prompt
from agentgym.types import ToolCall

MAX_DELAY = 60.0
"""Longest wait between two attempts, whatever ``Retry-After`` asks (seconds)."""
START_HINT = "start one with `agentgym serve` or `vllm serve`"


class BackendError(AgentGymError, RuntimeError):
    """A generation server failed or answered something unusable.

    Attributes:
        url: The URL that was called.
        status: The HTTP status, when the server answered.
    """

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None
                 ) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class BackendUnavailableError(BackendError, ConnectionError):
    """No server answers at the URL (refused or dropped connections, after retries)."""


class BackendTimeoutError(BackendError, TimeoutError):
    """The server did not answer within the timeout (after retries)."""


class BackendRequestError(BackendError):
    """The server rejected the request (a 4xx other than 408/429); retrying cannot help."""


class _Retryable(Exception):
    """One failed attempt that another attempt may fix."""

    def __init__(self, kind: Literal["timeout", "connection", "status"], detail: str,
                 status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.kind, self.detail, self.status, self.retry_after = kind, detail, status, retry_after

    def final(self, url: str, attempts: int, timeout: float) -> BackendError:
        tries = f"{attempts} attempt{'s' * (attempts > 1)}"
        if self.kind == "timeout":
            return BackendTimeoutError(f"{url} did not answer within {timeout:g} s ({tries})",
                                       url=url)
        if self.kind == "connection":
            return BackendUnavailableError(
                f"cannot reach {url} ({tries}): {self.detail}; is the server running? "
                f"{START_HINT}", url=url)
        return BackendError(f"{url} failed with HTTP {self.status} ({tries}): {self.detail}",
                            url=url, status=self.status)


class OpenAIPolicy:
    """Generate with an OpenAI-compatible HTTP server.

    Args:
        base_url: API root, usually ending in ``/v1`` (``http://127.0.0.1:8000/v1``).
        model: Model name the server serves (see :meth:`check`).
        api_key: Sent as ``Authorization: Bearer ...`` when given.
        max_concurrency: Requests in flight at once, across all ``generate`` calls.
        timeout: Seconds one attempt may take.
        max_retries: Retries after the first attempt for retryable faults.
        backoff: First retry delay in seconds; doubles each retry, with +-50% jitter.
        mode: ``chat`` (messages) or ``completions`` (token ids); see the module docstring.
        tokenizer: The model's Hugging Face tokenizer; ``completions`` mode needs it for
            requests that carry messages but no ``prompt_ids``.
        token_ids: Ask for exact token ids (``return_token_ids``, a vLLM extension). Set
            False for servers that reject unknown fields, such as api.openai.com.
        extra_body: More JSON fields merged into every request (``top_k``, ...).

    Example:
        >>> policy = OpenAIPolicy("http://127.0.0.1:8000/v1", "Qwen/Qwen3-0.6B")
        >>> policy.mode
        'chat'
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_concurrency: int = 32, timeout: float = 60.0, max_retries: int = 5,
                 backoff: float = 0.5, mode: Literal["chat", "completions"] = "chat",
                 tokenizer: Any = None, token_ids: bool = True,
                 extra_body: Mapping[str, Any] | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if mode not in ("chat", "completions"):
            raise ConfigError(f"mode must be 'chat' or 'completions', got {mode!r}")
        if max_concurrency < 1 or timeout <= 0 or max_retries < 0 or backoff < 0:
            raise ConfigError(
                "expected max_concurrency >= 1, timeout > 0, max_retries >= 0, backoff >= 0; "
                f"got {max_concurrency}, {timeout}, {max_retries}, {backoff}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.max_concurrency = max_concurrency
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.mode = mode
        self.tokenizer = tokenizer
        self.token_ids = token_ids
        self.extra_body = dict(extra_body or {})
        self._session: aiohttp.ClientSession | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _session_here(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        """The session and semaphore of the running loop, made on first use.

        A session is bound to its event loop; a policy reused under a second ``asyncio.run``
        gets a fresh one (the old loop is gone, so the old session is only detached).
        """
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            if self._session is not None and not self._session.closed:
                self._session.detach()
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
            self._session = aiohttp.ClientSession(
                headers=headers, connector=aiohttp.TCPConnector(limit=self.max_concurrency))
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
            self._loop = loop
        assert self._semaphore is not None
        return self._session, self._semaphore

    async def aclose(self) -> None:
        """Close the HTTP session; idempotent. A later call opens a new one."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            if self._loop is asyncio.get_running_loop():
                await session.close()
            else:
                session.detach()

    async def check(self) -> list[str]:
        """Make sure a server answers and serves :attr:`model`; call it before a run.

        Returns:
            The model ids the server serves.

        Raises:
            BackendUnavailableError: Nothing answers at :attr:`base_url`.
            BackendError: The server answered, but not as an OpenAI-compatible server.
            ConfigError: The server does not serve :attr:`model`.
        """
        session, _ = self._session_here()
        url = f"{self.base_url}/models"
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(
                    total=min(self.timeout, 10.0))) as resp:
                status, body = resp.status, await resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise BackendUnavailableError(
                f"no OpenAI-compatible server answers at {self.base_url}: "
                f"{str(exc) or type(exc).__name__}; {START_HINT}", url=url) from exc
        if status != 200:
            hint = (f"; did you mean {self.base_url}/v1?"
                    if status == 404 and not self.base_url.endswith("/v1") else "")
            hint = "; pass the server's api_key" if status in (401, 403) else hint
            raise BackendRequestError(
                f"{url} answered HTTP {status}: {_error_message(body)}{hint}", url=url,
                status=status)
        models = _json_object(body, url).get("data")
        if not isinstance(models, list):
            raise BackendError(f"{url} answered without a 'data' list of models", url=url)
        ids = [str(m.get("id")) for m in models if isinstance(m, Mapping)]
        if self.model not in ids:
            raise ConfigError(f"model {self.model!r} is not served at {self.base_url}; it serves "
                              f"{ids}{did_you_mean(self.model, ids)}")
        return ids

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request concurrently (under ``max_concurrency``), in order.

        Raises:
            BackendError: A request failed; the other requests of the call are cancelled.
            ConfigError: A request cannot be sent in this mode.
        """
        tasks = [asyncio.ensure_future(self._generate_one(r)) for r in requests]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _generate_one(self, request: GenerationRequest) -> Completion:
        if self.mode == "chat":
            if not request.messages:
                raise ConfigError("chat mode sends messages, and this request has only "
                                  "prompt_ids; use OpenAIPolicy(..., mode='completions')")
            url = f"{self.base_url}/chat/completions"
            return _parse_chat(await self._post(url, self._chat_payload(request)), url)
        prompt_ids = request.prompt_ids or self._tokenize(request)
        url = f"{self.base_url}/completions"
        payload = {**self._sampling(request), "prompt": list(prompt_ids), "logprobs": 1}
        return _parse_completion(await self._post(url, payload), url, prompt_ids)

    def _sampling(self, request: GenerationRequest) -> dict[str, Any]:
        p = request.params
        out: dict[str, Any] = {"model": self.model, "temperature": p.temperature,
                               "top_p": p.top_p, "max_tokens": p.max_tokens}
        if p.stop:
            out["stop"] = list(p.stop)
        if p.seed is not None:
            out["seed"] = p.seed
        if self.token_ids:
            out["return_token_ids"] = True
        return {**out, **self.extra_body}

    def _chat_payload(self, request: GenerationRequest) -> dict[str, Any]:
        messages = [m.to_chat() for m in request.messages]
        for m in messages:  # the OpenAI schema wants arguments as a JSON string
            for call in m.get("tool_calls", ()):
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"],
                                                           ensure_ascii=False)
        payload = {**self._sampling(request), "messages": messages, "logprobs": True}
        if request.tools:
            payload["tools"] = [t.to_openai() for t in request.tools]
        return payload

    def _tokenize(self, request: GenerationRequest) -> tuple[int, ...]:
        if self.tokenizer is None:
            raise ConfigError(
                "completions mode needs prompt_ids or a tokenizer to build them; pass "
                "OpenAIPolicy(..., tokenizer=load_tokenizer(model)) or use mode='chat'")
        text = render_prompt(self.tokenizer, request.messages, request.tools)
        # The template already wrote BOS and friends, so add no special tokens again.
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    async def _post(self, url: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST with retries; the parsed JSON object the server answered."""
        session, semaphore = self._session_here()
        attempt = 0
        while True:
            try:
                async with semaphore:
                    return await self._post_once(session, url, payload)
            except _Retryable as exc:
                if attempt >= self.max_retries:
                    raise exc.final(url, attempt + 1, self.timeout) from None
                delay = exc.retry_after
                if delay is None:
                    delay = self.backoff * 2**attempt * random.uniform(0.5, 1.5)
                attempt += 1
                await asyncio.sleep(min(delay, MAX_DELAY))

    async def _post_once(self, session: aiohttp.ClientSession, url: str,
                         payload: Mapping[str, Any]) -> dict[str, Any]:
        try:
            async with session.post(url, json=payload,
                                    timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                status, headers, body = resp.status, resp.headers, await resp.read()
        except TimeoutError as exc:  # before ClientError: ServerTimeoutError is both
            raise _Retryable("timeout", f"no answer within {self.timeout:g} s") from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise _Retryable("connection", str(exc) or type(exc).__name__) from exc
        if status in (408, 429) or status >= 500:
            raise _Retryable("status", _error_message(body), status,
                             _retry_after(headers.get("Retry-After")))
        if status >= 400:
            raise BackendRequestError(
                f"{url} rejected the request with HTTP {status}: {_error_message(body)}",
                url=url, status=status)
        if status != 200:
            raise BackendError(f"{url} answered HTTP {status}; expected 200", url=url,
                               status=status)
        return _json_object(body, url)


def _json_object(body: bytes, url: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BackendError(f"{url} answered with a body that is not JSON ({len(body)} bytes): "
                           f"{body[:200]!r}", url=url) from None
    if not isinstance(data, dict):
        raise BackendError(f"{url} answered JSON {type(data).__name__}; expected an object",
                           url=url)
    if "error" in data and "choices" not in data:
        raise BackendError(f"{url} answered an error: {_error_message(body)}", url=url)
    return data


def _error_message(body: bytes) -> str:
    """The message of an OpenAI / vLLM / FastAPI error body, else the body's start."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
        for key in ("message", "detail", "error"):
            if data.get(key):
                return str(data[key])
    text = body[:300].decode("utf-8", "replace").strip()
    return text or "(empty body)"


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header in seconds form (LLM servers' form)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # the HTTP-date form: fall back to our own backoff


def _first_choice(data: Mapping[str, Any], url: str) -> Mapping[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise BackendError(f"{url} answered without a 'choices' list holding an object; "
                           f"the answer has keys {sorted(data)}", url=url)
    return choices[0]


def _finish(raw: object) -> FinishReason:
    if raw == "length":
        return "length"
    return "error" if raw in ("error", "abort") else "stop"  # tool_calls, content_filter: stop


def _ints(value: object, what: str, url: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(_is(v, int) for v in value):
        raise BackendError(f"{url} answered {what} that is not a list of ints", url=url)
    return tuple(value)


def _floats(value: list[Any], what: str, url: str) -> tuple[float, ...]:
    if not all(_is(v, int | float) for v in value):
        raise BackendError(f"{url} answered {what} holding non-numbers", url=url)
    return tuple(float(v) for v in value)


def _is(value: object, kind: Any) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def _completion(choice: Mapping[str, Any], data: Mapping[str, Any], url: str, text: str,
                logprobs: tuple[float, ...], completion_ids: tuple[int, ...],
                prompt_ids: tuple[int, ...] = (),
                tool_calls: tuple[ToolCall, ...] = ()) -> Completion:
    """Assemble a Completion; token ids come per choice (vLLM completions) or top level."""
    completion_ids = _ints(choice.get("token_ids"), "token_ids", url) or completion_ids
    prompt_ids = (_ints(choice.get("prompt_token_ids"), "prompt_token_ids", url)
                  or _ints(data.get("prompt_token_ids"), "prompt_token_ids", url) or prompt_ids)
    if completion_ids and logprobs and len(logprobs) != len(completion_ids):
        raise BackendError(f"{url} answered {len(logprobs)} log-probs for "
                           f"{len(completion_ids)} tokens", url=url)
    version = choice.get("policy_version")
    return Completion(text=text, prompt_ids=prompt_ids, completion_ids=completion_ids,
                      logprobs=logprobs, finish_reason=_finish(choice.get("finish_reason")),
                      tool_calls=tool_calls,
                      policy_version=version if _is(version, int) else None)


def _parse_chat(data: Mapping[str, Any], url: str) -> Completion:
    choice = _first_choice(data, url)
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise BackendError(f"{url} answered a choice without a 'message' object", url=url)
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise BackendError(f"{url} answered message content of type "
                           f"{type(content).__name__}; expected a string", url=url)
    calls, content = _tool_calls(message.get("tool_calls"), content, url)
    lp = choice.get("logprobs") or {}
    entries = (lp.get("content") or []) if isinstance(lp, Mapping) else None
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise BackendError(f"{url} answered logprobs.content that is not a list of objects",
                           url=url)
    logprobs = _floats([e.get("logprob") for e in entries], "logprobs.content", url)
    return _completion(choice, data, url, content, logprobs, (), tool_calls=calls)


def _tool_calls(raw: object, content: str, url: str) -> tuple[tuple[ToolCall, ...], str]:
    """Calls the server parsed, and the text the env should read.

    When some call's arguments are not a JSON object, that is the model's mistake, not the
    server's: no structured calls are returned and every call is appended to the text as a
    ``<tool_call>`` block, raw arguments and all, so the env's parser reports the error to
    the model as an observation.
    """
    if not raw:
        return (), content
    if not isinstance(raw, list):
        raise BackendError(f"{url} answered tool_calls that is not a list", url=url)
    calls: list[tuple[str, str, Any]] = []
    for i, item in enumerate(raw):
        fn = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise BackendError(f"{url} answered tool_calls[{i}] without function.name", url=url)
        calls.append((str(item.get("id") or f"call_{i}"), fn["name"], fn.get("arguments")))
    parsed = [_arguments(args) for _, _, args in calls]
    whole = [p for p in parsed if p is not None]
    if len(whole) == len(parsed):
        return tuple(ToolCall(cid, name, p) for (cid, name, _), p in zip(calls, whole,
                                                                          strict=True)), content
    blocks = "".join(
        f'<tool_call>{{"name": {json.dumps(name)}, "arguments": '
        f"{args if isinstance(args, str) else json.dumps(args)}}}</tool_call>"
        for _, name, args in calls)
    return (), f"{content}\n{blocks}" if content else blocks


def _arguments(raw: object) -> dict[str, Any] | None:
    """Tool arguments as a dict (from a JSON string or an object); None when unreadable."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):  # also too deep or a number too long: the
            return None  # model's mistake, which the env's parser reports
    return dict(raw) if isinstance(raw, Mapping) else None


def _parse_completion(data: Mapping[str, Any], url: str,
                      prompt_ids: tuple[int, ...]) -> Completion:
    choice = _first_choice(data, url)
    text = choice.get("text")
    if not isinstance(text, str):
        raise BackendError(f"{url} answered a choice without a 'text' string", url=url)
    lp = choice.get("logprobs") or {}
    if not isinstance(lp, Mapping):
        raise BackendError(f"{url} answered logprobs that is not an object", url=url)
    logprobs = _floats(list(lp.get("token_logprobs") or ()), "logprobs.token_logprobs", url)
    # Servers run with --return-tokens-as-token-ids name each token "token_id:<id>".
    tokens = lp.get("tokens") or []
    ids = ()
    if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        try:
            ids = tuple(int(t.removeprefix("token_id:")) for t in tokens)
        except ValueError:
            ids = ()
    return _completion(choice, data, url, text, logprobs, ids, prompt_ids=prompt_ids)
