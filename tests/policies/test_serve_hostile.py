"""agentgym serve against hostile clients: every mistake is a 4xx naming the field, slow and
idle connections are closed, big inputs are parsed off the event loop (a real server, real
sockets, a canned policy)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientSession

from agentgym.serve import ServeLimits, serve

from .test_serve import MODEL, CannedPolicy, CharTokenizer

BOUND_S = 60.0  # generous: readiness and answers on a busy machine


@contextlib.asynccontextmanager
async def running(policy: Any, **limits: Any) -> AsyncIterator[tuple[str, int]]:
    """``serve(policy)`` on a free port of 127.0.0.1; yields (base URL, port); always stopped."""
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(policy, port=0, model_name=MODEL, limits=ServeLimits(
        **limits), on_ready=ready.set_result))
    try:
        done, _ = await asyncio.wait({ready, task}, timeout=BOUND_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert ready in done, "the server did not start"
        url = ready.result().removesuffix("/v1")
        yield url, int(url.rsplit(":", 1)[1])
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def server():
    policy = CannedPolicy(tokenizer=CharTokenizer())
    async with running(policy, max_body_bytes=2**20) as (url, port), ClientSession() as s:
        yield policy, url, port, s


def deep(n: int) -> Any:
    value: Any = []
    for _ in range(n):
        value = [value]
    return value


USER = [{"role": "user", "content": "x"}]
CHAT, COMP = "/v1/chat/completions", "/v1/completions"


def call(arguments: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}]


ARGS = "messages[0].tool_calls[0].function.arguments"
# (path, body as bytes or JSON, extra headers, status, param, needle)
CASES = [
    (CHAT, b"[" * 100_000 + b"]" * 100_000, {}, 400, None, "nested too deeply"),
    (CHAT, {"messages": USER, "user": deep(200)}, {}, 400, "user" + "[0]" * 63,
     "more than 64 levels"),
    (CHAT, {"messages": call("[" * 100_000 + "]" * 100_000)}, {}, 400, None,
     f"{ARGS} is nested too deeply"),
    (CHAT, {"messages": call(json.dumps({"a": deep(100)}))}, {}, 400, ARGS + ".a" + "[0]" * 63,
     "more than 64 levels"),
    (CHAT, b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', {}, 400,
     "messages[0].content", "lone surrogate"),
    (CHAT, b'{"messages": [{"role": "user", "content": "x", "\\udfff": 1}]}', {}, 400,
     "messages[0].\udfff (a key)", "lone surrogate"),
    (CHAT, {"messages": call('{"a": "\\ud800"}')}, {}, 400, ARGS + ".a", "lone surrogate"),
    (COMP, b'{"prompt": "a\\ud800b"}', {}, 400, "prompt", "lone surrogate"),
    (COMP, b'{"prompt": "ab"}', {"Content-Encoding": "gzip"}, 400, "Content-Encoding",
     "not gzip data"),
    (COMP, b'{"prompt": "ab"}', {"Content-Encoding": "deflate"}, 400, "Content-Encoding",
     "not deflate data"),
    (COMP, {"prompt": "ab", "seed": 10**30}, {}, 400, "seed", "64 bits"),
    (COMP, {"prompt": "ab", "max_tokens": 10**20}, {}, 400, "max_tokens", "must be in"),
    (COMP, {"prompt": "ab", "logprobs": "yes"}, {}, 400, "logprobs", "integer"),
    (COMP, {"prompt": "ab", "stop": ["s"] * 17}, {}, 400, "stop", "at most 16"),
    (COMP, {"prompt": "ab", "stream": "yes"}, {}, 400, "stream", "boolean"),
    (COMP, {"prompt": "ab", "add_special_tokens": "no"}, {}, 400, "add_special_tokens",
     "boolean"),
    (CHAT, {"messages": USER, "temperature": "hot"}, {}, 400, "temperature", "number"),
    (CHAT, {"messages": USER, "top_logprobs": 99}, {}, 400, "top_logprobs", "[0, 20]"),
    (CHAT, {"messages": USER, "logprobs": 3}, {}, 400, "logprobs", "boolean"),
    (CHAT, {"messages": USER, "tool_choice": {"a": 1}}, {}, 400, "tool_choice", "one of"),
    (CHAT, {"messages": [{"role": "tool", "content": "x", "name": 5}]}, {}, 400,
     "messages[0].name", "string"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, {}, 400,
     "messages[0].content[0].text", "string"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {
        "name": "f", "description": 5}}]}, {}, 400, "tools[0].function.description", "string"),
    (CHAT, {"messages": USER, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": [1]}}]}, {}, 400, "tools[0].function.parameters", "object"),
    (CHAT, {"messages": USER, "model": "gpt-9"}, {}, 404, "model", "gpt-9"),
    (CHAT, b"x" * (2**20 + 10), {}, 413, None, "at most"),
]


@pytest.mark.parametrize(("path", "body", "headers", "status", "param", "needle"), CASES,
                         ids=[f"{i}-{c[3]}" for i, c in enumerate(CASES)])
async def test_client_mistakes_are_4xx_naming_the_field_without_a_traceback(
        server, caplog, path, body, headers, status, param, needle):
    policy, url, _, session = server
    caplog.set_level(logging.DEBUG)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url + path, data=data, headers={
            "Content-Type": "application/json", **headers}) as resp:
        assert resp.status == status
        error = (await resp.json())["error"]
    assert needle in error["message"] and error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert policy.requests == []
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
            ] == []
    async with session.get(url + "/health") as health:  # still answering
        assert health.status == 200


async def test_a_policy_fault_is_still_a_500_with_a_traceback_in_the_log(caplog):
    caplog.set_level(logging.DEBUG)
    policy = CannedPolicy(error=RuntimeError("CUDA out of memory"))
    async with running(policy) as (url, _), ClientSession() as session, \
            session.post(url + CHAT, json={"messages": USER}) as resp:
        assert resp.status == 500
        assert (await resp.json())["error"]["type"] == "server_error"
    assert any(r.exc_info for r in caplog.records)


async def test_malformed_http_is_a_400_logged_in_one_line(server, caplog):
    _, _, port, _ = server
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: br\r\n"
                 b"Content-Length: 2\r\n\r\n{}")
    answer = await asyncio.wait_for(reader.read(), BOUND_S)
    writer.close()
    assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n", 1)[0]
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
            ] == []


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), BOUND_S)


async def test_slow_and_idle_connections_are_closed():
    policy = CannedPolicy(tokenizer=CharTokenizer())
    async with running(policy, idle_timeout_s=0.5, body_timeout_s=0.5) as (url, port):
        body = json.dumps({"prompt": "ab"}).encode()
        starts = [
            b"",  # connects and sends nothing
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n",  # a head that never ends
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body[:5]),  # a body that never ends
        ]
        streams = []
        for start in starts * 10:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(start)
            streams.append((start, reader, writer))
        async with ClientSession() as session, session.get(url + "/health") as health:
            assert health.status == 200  # 30 stalled connections do not stall the server
        answers = await asyncio.gather(*(closed_by_server(r) for _, r, _ in streams))
        for (start, _, writer), answer in zip(streams, answers, strict=True):
            writer.close()
            if b"Content-Length" in start:
                assert b" 408 " in answer.split(b"\r\n", 1)[0]
                assert b"did not arrive within 0.5 s" in answer
            else:
                assert answer == b""  # closed without a word: no request came
        # An idle keep-alive connection is closed too, after its answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await closed_by_server(reader)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"status": "ok"}')


async def test_a_big_prompt_is_tokenized_off_the_event_loop(server):
    """The tokenizer blocks until /health has answered: on the event loop it never would."""
    policy, url, _, session = server
    answered, entered = threading.Event(), threading.Event()
    plain, waited = policy.tokenizer.encode, []

    def gated(text: str, add_special_tokens: bool = True) -> list[int]:
        entered.set()
        waited.append(answered.wait(BOUND_S))  # False: /health could not answer meanwhile
        return plain(text, add_special_tokens)

    policy.tokenizer.encode = gated
    prompt = "y" * (600 * 2**10)  # above the inline size, under the 1 MiB body limit
    request = asyncio.create_task(session.post(url + COMP, json={"prompt": prompt}))
    while not entered.is_set():
        assert not request.done(), await request
        await asyncio.sleep(0.01)
    async with session.get(url + "/health") as health:
        assert health.status == 200
        answered.set()
    resp = await request
    assert resp.status == 200 and waited == [True]
    assert policy.requests[0].prompt_ids == (1, *[ord("y")] * len(prompt))


async def test_a_client_that_does_not_read_its_answer_is_cut_off(caplog):
    caplog.set_level(logging.INFO)
    policy = CannedPolicy("z" * 3_000_000)  # an answer of about 18 MB: more than the buffers
    async with running(policy, write_timeout_s=0.5) as (_, port):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, ("127.0.0.1", port))
        body = json.dumps({"prompt": [5, 6]}).encode()
        await loop.sock_sendall(sock, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        with sock:
            await until_logged(caplog, "did not read its response")
            received = b""
            with contextlib.suppress(ConnectionError):
                while chunk := await asyncio.wait_for(loop.sock_recv(sock, 2**20), BOUND_S):
                    received += chunk
    head, _, payload = received.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    assert len(payload) < length  # the server closed the connection mid-answer


async def until_logged(caplog: pytest.LogCaptureFixture, needle: str) -> None:
    for _ in range(int(BOUND_S / 0.05)):
        if any(needle in r.getMessage() for r in caplog.records):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no log line with {needle!r} in {BOUND_S} s")
