"""The answers of :mod:`agentgym.serve`: whole replies, and server-sent events as tokens come.

A reply holds ``n`` choices of one prompt. Streamed (``stream: true``), it is the OpenAI API's
event stream: ``data: {chunk}`` lines, each chunk with ``choices[].delta`` (chat) or
``choices[].text`` (completions), a last chunk per choice with its ``finish_reason``, a
``usage`` chunk when ``stream_options.include_usage`` asks for one, then ``data: [DONE]``.
Every chunk also carries the exact ids of the tokens it holds (``token_ids``, as vLLM names
them) and the first one the prompt's (``prompt_token_ids``), so the concatenated chunks give
what the non-streamed reply gives, token for token.

Tokens reach the event loop through a :class:`TokenFeed` (the policy's ``on_token`` hook,
called from its decoding thread). A policy without the hook streams its whole completion in
the last chunks, when it ends. Text is decoded incrementally: a token that ends inside a
UTF-8 character adds its id to a chunk but no text until the character is complete; the
last chunk adds whatever the full decode holds beyond the text already sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from agentgym.parsing import parse_tool_calls
from agentgym.policies.base import Completion, SampledToken
from agentgym.serve_request import Choices
from agentgym.types import ToolCall

log = logging.getLogger("agentgym.serve")
Kind = Literal["chat", "text"]
Top = tuple[tuple[int, float], ...]


class TokenFeed:
    """Hands each choice's tokens from the decoding thread to the event loop, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[tuple[int, SampledToken]] = asyncio.Queue()

    def hook(self, index: int) -> Callable[[SampledToken], None]:
        """The ``on_token`` of choice ``index``."""

        def push(token: SampledToken) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
                self.loop.call_soon_threadsafe(self.queue.put_nowait, (index, token))

        return push

    def drain(self) -> list[tuple[int, SampledToken]]:
        """Every token queued so far."""
        out = []
        while not self.queue.empty():
            out.append(self.queue.get_nowait())
        return out


@dataclass
class _Choice:
    """What has been streamed of one choice."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[Top] = field(default_factory=list)
    text: str = ""
    prefix: int = 0  # the incremental decode re-decodes ids[prefix:] ...
    read: int = 0  # ... and has sent the text of ids[:read]
    started: bool = False


class Reply:
    """Builds the OpenAI bodies of one request's answer (whole, or as chunks).

    Args:
        kind: ``chat`` or ``text`` (completions).
        model: The served model's name.
        tokenizer: The policy's tokenizer, or None (tokens are then named ``token_id:<id>``).
        choices: What the request asked for.
        logprobs: Whether to return log-probs.
        parse_calls: Chat only: read tool calls from the text (tools were offered).
    """

    def __init__(self, kind: Kind, model: str, tokenizer: Any, choices: Choices, *,
                 logprobs: bool, parse_calls: bool = False) -> None:
        self.kind, self.model, self.tokenizer = kind, model, tokenizer
        self.choices, self.logprobs, self.parse_calls = choices, logprobs, parse_calls
        self.id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self._state = [_Choice() for _ in range(choices.n)]

    # -- whole replies ------------------------------------------------------------------

    def body(self, done: Sequence[Completion], tops: Sequence[Sequence[Top]]) -> dict[str, Any]:
        """The non-streamed reply; ``tops[i]`` holds choice i's alternatives per token."""
        out = []
        for i, completion in enumerate(done):
            top = list(tops[i]) if len(tops[i]) == len(completion.completion_ids) else []
            logprobs = self._logprobs(completion.completion_ids, completion.logprobs, top, 0) \
                if self.logprobs and completion.logprobs else None
            if self.kind == "chat":
                message: dict[str, Any] = {"role": "assistant", "content": completion.text}
                calls = self._calls(completion)
                if calls:
                    message["tool_calls"] = [_openai_call(c) for c in calls]
                out.append({"index": i, "message": message, "logprobs": logprobs,
                            "finish_reason": _finish(completion, calls), **_ids(completion)})
            else:
                out.append({"index": i, "text": completion.text, "logprobs": logprobs,
                            "finish_reason": completion.finish_reason,
                            "prompt_token_ids": list(completion.prompt_ids), **_ids(completion)})
        body = self._head("chat.completion" if self.kind == "chat" else "text_completion")
        body.update(choices=out, usage=_usage(done))
        if self.kind == "chat":
            body["prompt_token_ids"] = list(done[0].prompt_ids) or None
        return body

    # -- streamed replies ---------------------------------------------------------------

    def chunks(self, tokens: Sequence[tuple[int, SampledToken]]) -> list[dict[str, Any]]:
        """The chunks for tokens just sampled: one per choice that has new tokens."""
        by_choice: dict[int, list[SampledToken]] = {}
        for index, token in tokens:
            by_choice.setdefault(index, []).append(token)
        out = []
        for index, new in by_choice.items():
            state = self._state[index]
            prompt = new[0].prompt_ids
            out.extend(self._start(index, prompt))
            start = len(state.ids)
            state.ids.extend(t.token for t in new)
            state.logprobs.extend(t.logprob for t in new)
            state.tops.extend(t.top for t in new)
            out.append(self._delta(index, self._text(state), start))
        return out

    def last_chunks(self, done: Sequence[Completion]) -> list[dict[str, Any]]:
        """Per choice: what the feed did not bring, any tool calls, and the finish reason."""
        out = []
        for index, completion in enumerate(done):
            state = self._state[index]
            out.extend(self._start(index, completion.prompt_ids))
            start = len(state.ids)
            rest = list(completion.completion_ids[start:])  # a policy without the feed
            state.ids.extend(rest)
            state.logprobs.extend(completion.logprobs[len(state.logprobs):])
            state.tops.extend([()] * len(rest))
            text = completion.text[len(state.text):] \
                if completion.text.startswith(state.text) else ""
            state.text += text
            if text or rest:
                out.append(self._delta(index, text, start))
            calls = self._calls(completion)
            if calls:
                out.append(self._chunk(index, {"tool_calls": [
                    {"index": k, **_openai_call(c)} for k, c in enumerate(calls)]}))
            last = self._chunk(index, {} if self.kind == "chat" else "",
                               finish=_finish(completion, calls))
            if completion.policy_version is not None:
                last["choices"][0]["policy_version"] = completion.policy_version
            out.append(last)
        if self.choices.include_usage:
            out.append({**self._head(self._object), "choices": [], "usage": _usage(done)})
        return out

    @property
    def _object(self) -> str:
        return "chat.completion.chunk" if self.kind == "chat" else "text_completion"

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _start(self, index: int, prompt_ids: Sequence[int]) -> list[dict[str, Any]]:
        """A choice's first chunk (chat: the role), once; it names the prompt's ids."""
        state = self._state[index]
        if state.started:
            return []
        state.started = True
        ids = list(prompt_ids) or None
        if self.kind == "chat":
            return [{**self._chunk(index, {"role": "assistant", "content": ""}),
                     "prompt_token_ids": ids}]
        chunk = self._chunk(index, "")
        chunk["choices"][0]["prompt_token_ids"] = ids
        return [chunk]

    def _chunk(self, index: int, delta: dict[str, Any] | str, *, finish: str | None = None,
               logprobs: Any = None, token_ids: list[int] | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index}
        choice.update({"delta": delta} if self.kind == "chat" else {"text": delta})
        choice.update(logprobs=logprobs, finish_reason=finish)
        if token_ids is not None:
            choice["token_ids"] = token_ids
        chunk = {**self._head(self._object), "choices": [choice]}
        if self.choices.include_usage:
            chunk["usage"] = None
        return chunk

    def _delta(self, index: int, text: str, start: int) -> dict[str, Any]:
        """The chunk of choice ``index``'s tokens from ``start`` on, whose text is ``text``."""
        state = self._state[index]
        ids, lps = state.ids[start:], state.logprobs[start:]
        logprobs = self._logprobs(ids, lps, state.tops[start:], len(state.text) - len(text)) \
            if self.logprobs and lps else None
        delta: dict[str, Any] | str = {"content": text} if self.kind == "chat" else text
        return self._chunk(index, delta, logprobs=logprobs, token_ids=ids)

    def _text(self, state: _Choice) -> str:
        """The text the choice's new tokens complete (held back inside a character)."""
        if self.tokenizer is None:
            return ""
        decode = self.tokenizer.decode
        before = decode(state.ids[state.prefix:state.read], skip_special_tokens=True)
        after = decode(state.ids[state.prefix:], skip_special_tokens=True)
        if len(after) <= len(before) or after.endswith("\ufffd") \
                or not after.startswith(before):
            return ""
        state.prefix, state.read = state.read, len(state.ids)
        state.text += after[len(before):]
        return after[len(before):]

    def _calls(self, completion: Completion) -> tuple[ToolCall, ...]:
        if self.kind != "chat":
            return ()
        if completion.tool_calls or not self.parse_calls:
            return completion.tool_calls
        return parse_tool_calls(completion.text).calls

    def _logprobs(self, ids: Sequence[int], logprobs: Sequence[float], tops: Sequence[Top],
                  offset: int) -> dict[str, Any]:
        """The ``logprobs`` field for these tokens; ``offset``: their text's start."""
        words = self._words(ids if len(ids) == len(logprobs) else (), len(logprobs))
        want = self.choices.top_logprobs
        if self.kind == "chat":
            return {"content": [
                {"token": w, "logprob": lp, "bytes": list(w.encode()), "top_logprobs": [
                    {"token": t, "logprob": tlp, "bytes": list(t.encode())}
                    for t, tlp in zip(self._words([i for i, _ in top], len(top)),
                                      [v for _, v in top], strict=True)] if want else []}
                for w, lp, top in zip(words, logprobs, _pad(tops, len(words)), strict=True)]}
        offsets = []
        for w in words:
            offsets.append(offset)
            offset += len(w)
        out: dict[str, Any] = {"tokens": words, "token_logprobs": list(logprobs),
                               "top_logprobs": None, "text_offset": offsets}
        if want:  # the k likeliest, and the sampled token (as OpenAI's legacy API does)
            out["top_logprobs"] = [
                {**dict(zip(self._words([i for i, _ in top], len(top)),
                            [v for _, v in top], strict=True)), w: lp}
                for w, lp, top in zip(words, logprobs, _pad(tops, len(words)), strict=True)]
        return out

    def _words(self, ids: Sequence[int], count: int) -> list[str]:
        """One string per token; ``token_id:<id>`` without a tokenizer."""
        if not ids:
            return [""] * count
        if self.tokenizer is None:
            return [f"token_id:{i}" for i in ids]
        return [self.tokenizer.decode([i]) for i in ids]


def _pad(tops: Sequence[Top], n: int) -> list[Top]:
    return list(tops[:n]) + [()] * (n - len(tops))


def _finish(done: Completion, calls: Sequence[ToolCall]) -> str:
    return "tool_calls" if calls and done.finish_reason == "stop" else done.finish_reason


def _ids(done: Completion) -> dict[str, Any]:
    out: dict[str, Any] = {"token_ids": list(done.completion_ids) or None}
    if done.policy_version is not None:
        out["policy_version"] = done.policy_version
    return out


def _usage(done: Sequence[Completion]) -> dict[str, int]:
    p = len(done[0].prompt_ids) if done else 0  # one prompt, counted once
    c = sum(len(d.completion_ids) for d in done)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _openai_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {
        "name": call.name, "arguments": json.dumps(dict(call.arguments), ensure_ascii=False)}}


def _event(data: Any) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


async def stream(request: web.Request, reply: Reply, feed: TokenFeed,
                 task: asyncio.Future[list[Completion]], write_timeout_s: float
                 ) -> web.StreamResponse:
    """Send ``reply`` as server-sent events while ``task`` (the policy's generate) runs.

    The headers go out with the first token (or the end): a request the policy refuses at
    once is still answered with its 4xx. A client that leaves, or reads nothing for
    ``write_timeout_s``, cancels ``task``: its rows leave the batch at the next token.
    """
    try:
        tokens = await _next(feed, task)
        if task.done():
            task.result()  # a refused request raises: answered as a plain error
    except BaseException:
        task.cancel()
        raise
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    try:
        async with asyncio.timeout(write_timeout_s):
            await response.prepare(request)
        while tokens or not task.done():
            for chunk in reply.chunks(tokens):
                await _write(response, _event(chunk), write_timeout_s)
            tokens = await _next(feed, task)
        for chunk in reply.last_chunks(task.result()):
            await _write(response, _event(chunk), write_timeout_s)
    except (ConnectionError, TimeoutError) as exc:  # the client left or stopped reading
        log.info("a streaming client of %s went away (%s); its generation is cancelled",
                 request.path, type(exc).__name__)
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError from None
    except Exception as exc:  # the policy (or this server) failed: the headers are sent
        log.exception("policy failed on %s (mid-stream)", request.path)
        error = {"message": f"the policy failed: {type(exc).__name__}: {exc}",
                 "type": "server_error", "param": None, "code": 500}
        with contextlib.suppress(ConnectionError, TimeoutError):
            await _write(response, _event({"error": error}), write_timeout_s)
    finally:
        if not task.done():
            task.cancel()
    with contextlib.suppress(ConnectionError, TimeoutError):
        await _write(response, b"data: [DONE]\n\n", write_timeout_s)
        async with asyncio.timeout(write_timeout_s):
            await response.write_eof()
    return response


async def _next(feed: TokenFeed, task: asyncio.Future[Any]) -> list[tuple[int, SampledToken]]:
    """The tokens queued now; waits for one, or for ``task`` to end, when there are none."""
    if feed.queue.empty() and not task.done():
        getter = asyncio.ensure_future(feed.queue.get())
        try:
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return [getter.result(), *feed.drain()]
    return feed.drain()


async def _write(response: web.StreamResponse, data: bytes, seconds: float) -> None:
    async with asyncio.timeout(seconds):
        await response.write(data)
