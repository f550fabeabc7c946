"""OpenAIPolicy against real HTTP servers on 127.0.0.1: agentgym's own and misbehaving ones."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentgym.errors import ConfigError
from agentgym.parsing import parse_tool_calls
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.openai import (
    BackendError,
    BackendRequestError,
    BackendTimeoutError,
    BackendUnavailableError,
    OpenAIPolicy,
)
from agentgym.prompting import render_prompt
from agentgym.serve import create_app
from agentgym.types import Message, ToolCall

from .test_serve import ADD, CALL_TEXT, MODEL, CannedPolicy, CharTokenizer

OK_BODY = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop"}]}
HI = GenerationRequest((Message("user", "hi"),), params=SamplingParams(temperature=0.0,
                                                                       max_tokens=8, seed=1))


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port; yields the /v1 base URL."""
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("/v1")).rstrip("/")


def one_route(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
              ) -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/v1/{tail:.*}", handler)
    return app


def client(url: str, **kwargs: object) -> OpenAIPolicy:
    kwargs = {"max_retries": 3, "backoff": 0.01, "timeout": 5.0, **kwargs}
    return OpenAIPolicy(url, MODEL, **kwargs)  # type: ignore[arg-type]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- round trips through agentgym's own server ---------------------------------------------

async def test_chat_round_trip_is_token_exact():
    policy = CannedPolicy("hello there")
    async with serving(create_app(policy, MODEL)) as url, client(url) as remote:
        [got] = await remote.generate([HI])
    expected = policy.expected(policy.requests[0])
    assert got == expected
    assert got.tokens() is not None and got.tokens().logprobs == expected.logprobs
    assert policy.requests[0].messages == HI.messages
    assert policy.requests[0].params == HI.params


async def test_chat_round_trip_with_tools_and_history():
    policy = CannedPolicy(CALL_TEXT)
    history = (Message("system", "You add."), Message("user", "1+2?"),
               Message("assistant", "", (ToolCall("call_0", "add", {"a": 1, "b": 2}),)),
               Message("tool", "3", tool_call_id="call_0", name="add"),
               Message("user", "again"))
    request = GenerationRequest(history, (ADD,))
    async with serving(create_app(policy, MODEL)) as url, client(url) as remote:
        [got] = await remote.generate([request])
    assert got.text == CALL_TEXT
    assert got.tool_calls == parse_tool_calls(CALL_TEXT).calls
    assert got.message().tool_calls[0].arguments == {"a": 1, "b": 2}
    assert got.finish_reason == "stop"
    assert got.completion_ids == policy.expected(request).completion_ids
    assert policy.requests[0].messages == history and policy.requests[0].tools == (ADD,)


async def test_completions_round_trip_with_prompt_ids_and_with_a_tokenizer():
    policy = CannedPolicy("fine", finish_reason="length")
    tokenizer = CharTokenizer()
    by_ids = GenerationRequest(prompt_ids=(7, 8, 9), params=SamplingParams(max_tokens=4))
    by_messages = GenerationRequest((Message("user", "hi"),), (ADD,))
    async with serving(create_app(policy, MODEL)) as url, \
            client(url, mode="completions", tokenizer=tokenizer) as remote:
        got = await remote.generate([by_ids, by_messages])
    assert got[0] == policy.expected(by_ids)
    assert got[0].finish_reason == "length"
    rendered = tuple(tokenizer.encode(render_prompt(tokenizer, by_messages.messages, (ADD,)),
                                      add_special_tokens=False))
    assert policy.requests[1].prompt_ids == rendered == got[1].prompt_ids
    assert got[1].logprobs == policy.expected(by_ids).logprobs


async def test_completions_mode_needs_ids_or_a_tokenizer():
    remote = client("http://127.0.0.1:9", mode="completions")
    with pytest.raises(ConfigError, match="tokenizer"):
        await remote.generate([HI])
    with pytest.raises(ConfigError, match="completions"):
        await client("http://127.0.0.1:9").generate([GenerationRequest(prompt_ids=(1,))])
    await remote.aclose()


# --- what vLLM and other servers answer ----------------------------------------------------

async def test_reads_vllm_token_ids_and_token_id_strings():
    async def handler(request: web.Request) -> web.Response:
        if request.path.endswith("/chat/completions"):
            assert (await request.json())["return_token_ids"] is True
            return web.json_response({"prompt_token_ids": [1, 2], "choices": [{
                "message": {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "x", "type": "function",
                     "function": {"name": "add", "arguments": '{"a": 1}'}}]},
                "logprobs": {"content": [{"token": "a", "logprob": -0.5}]},
                "token_ids": [42], "finish_reason": "tool_calls"}]})
        return web.json_response({"choices": [{"text": "ab", "finish_reason": "length",
                                               "logprobs": {"tokens": ["token_id:5",
                                                                       "token_id:6"],
                                                            "token_logprobs": [-1, -2.5]}}]})

    async with serving(one_route(handler)) as url:
        async with client(url) as remote:
            [chat] = await remote.generate([HI])
        async with client(url, mode="completions") as remote:
            [comp] = await remote.generate([GenerationRequest(prompt_ids=(3,))])
    assert chat.text == "" and chat.tool_calls == (ToolCall("x", "add", {"a": 1}),)
    assert (chat.prompt_ids, chat.completion_ids, chat.logprobs) == ((1, 2), (42,), (-0.5,))
    assert (comp.prompt_ids, comp.completion_ids, comp.logprobs) == ((3,), (5, 6), (-1, -2.5))
    assert comp.finish_reason == "length"


async def test_unreadable_tool_arguments_go_to_the_env_as_text():
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"finish_reason": "tool_calls", "message": {
            "content": "", "tool_calls": [
                {"id": "a", "function": {"name": "add", "arguments": '{"a": 1'}}]}}]})

    async with serving(one_route(handler)) as url, client(url) as remote:
        [got] = await remote.generate([HI])
    assert got.tool_calls == ()
    parsed = parse_tool_calls(got.text)
    assert parsed.calls == () and len(parsed.errors) == 1  # the env shows this to the model


# --- faults -------------------------------------------------------------------------------

async def test_retries_429_and_500_then_succeeds():
    attempts = []

    async def handler(request: web.Request) -> web.Response:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            return web.json_response({"error": {"message": "slow down"}}, status=429,
                                     headers={"Retry-After": "0"})
        if len(attempts) == 2:
            return web.Response(status=500, text="boom")
        return web.json_response(OK_BODY)

    async with serving(one_route(handler)) as url, client(url) as remote:
        [got] = await remote.generate([HI])
    assert got.text == "ok" and len(attempts) == 3


async def test_persistent_500_raises_after_max_retries():
    attempts = []

    async def handler(request: web.Request) -> web.Response:
        attempts.append(1)
        return web.json_response({"error": {"message": "engine dead"}}, status=503)

    async with serving(one_route(handler)) as url, client(url, max_retries=2) as remote:
        with pytest.raises(BackendError, match=r"HTTP 503 \(3 attempts\): engine dead") as info:
            await remote.generate([HI])
    assert len(attempts) == 3 and info.value.status == 503


async def test_400_raises_at_once_with_the_server_message():
    attempts = []

    async def handler(request: web.Request) -> web.Response:
        attempts.append(1)
        return web.json_response({"object": "error", "message": "max_tokens is too large"},
                                 status=400)

    async with serving(one_route(handler)) as url, client(url) as remote:
        with pytest.raises(BackendRequestError, match="max_tokens is too large"):
            await remote.generate([HI])
    assert len(attempts) == 1


@pytest.mark.parametrize(("body", "needle"), [
    (b"<html><body>502 Bad Gateway</body></html>", "not JSON"),
    (b'{"choices": [{"message": {"content": "tru', "not JSON"),
    (b'{"id": "x"}', "'choices'"),
    (b'{"choices": [{"text": "no message"}]}', "'message'"),
    (b'{"choices": [{"message": {"content": "x"}, "token_ids": [1, 2],'
     b' "logprobs": {"content": [{"logprob": -1}]}}]}', "1 log-probs for 2 tokens"),
    (b'{"error": {"message": "internal"}}', "internal"),
])
async def test_garbage_raises_backend_error(body, needle):
    attempts = []

    async def handler(request: web.Request) -> web.Response:
        attempts.append(1)
        return web.Response(body=body, content_type="text/html")

    async with serving(one_route(handler)) as url, client(url) as remote:
        with pytest.raises(BackendError, match=needle) as info:
            await remote.generate([HI])
    assert url in str(info.value) and len(attempts) == 1


async def test_hanging_server_times_out():
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response(OK_BODY)

    async with serving(one_route(handler)) as url:
        remote = client(url, timeout=0.2, max_retries=1, backoff=0.0)
        start = time.monotonic()
        with pytest.raises(BackendTimeoutError, match="within 0.2 s"):
            await remote.generate([HI])
        assert 0.35 < time.monotonic() - start < 2.0
        release.set()
        await remote.aclose()


async def test_concurrency_limit_is_respected():
    in_flight, peak = 0, 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.03)
        in_flight -= 1
        body = await request.json()
        text = body["messages"][0]["content"]
        return web.json_response({"choices": [{"message": {"content": text}}]})

    requests = [GenerationRequest((Message("user", str(i)),)) for i in range(12)]
    async with serving(one_route(handler)) as url, client(url, max_concurrency=3) as remote:
        got = await remote.generate(requests)
    assert [c.text for c in got] == [str(i) for i in range(12)]
    assert peak == 3


async def test_connection_refused_raises_unavailable():
    remote = client(f"http://127.0.0.1:{closed_port()}/v1", max_retries=1, backoff=0.0)
    with pytest.raises(BackendUnavailableError, match="2 attempts"):
        await remote.generate([HI])
    await remote.aclose()
    await remote.aclose()  # idempotent


# --- check() ------------------------------------------------------------------------------

async def test_check_reports_a_missing_server_clearly():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    async with client(url) as remote:
        with pytest.raises(BackendUnavailableError,
                           match=f"no OpenAI-compatible server answers at {url}.*agentgym serve"):
            await remote.check()


async def test_check_lists_models_and_rejects_a_wrong_name():
    async with serving(create_app(CannedPolicy(), MODEL)) as url:
        async with client(url) as remote:
            assert await remote.check() == [MODEL]
        async with OpenAIPolicy(url, "caned") as remote:
            with pytest.raises(ConfigError, match="did you mean 'canned'"):
                await remote.check()
        async with OpenAIPolicy(url.removesuffix("/v1"), MODEL) as remote:
            with pytest.raises(BackendRequestError, match="did you mean .*/v1"):
                await remote.check()


def test_constructor_validates():
    with pytest.raises(ConfigError, match="http"):
        OpenAIPolicy("127.0.0.1:8000", MODEL)
    with pytest.raises(ConfigError, match="mode"):
        OpenAIPolicy("http://127.0.0.1:8000/v1", MODEL, mode="text")  # type: ignore[arg-type]


def test_import_agentgym_does_not_import_aiohttp():
    code = "import sys, agentgym; assert 'aiohttp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- a real (tiny) transformers model behind the server ----------------------------------

HAS_HF = importlib.util.find_spec("agentgym.policies.hf") is not None


@pytest.mark.skipif(not HAS_HF, reason="agentgym.policies.hf is not there yet")
async def test_transformers_policy_served_matches_direct_greedy(smollm2_tokenizer):
    pytest.importorskip("torch")
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.policies.models import tiny_model

    tokenizer = smollm2_tokenizer
    local = TransformersPolicy(tiny_model(tokenizer=tokenizer), tokenizer)
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    chat = GenerationRequest((Message("user", "Say hi."),), params=greedy)
    prompt_ids = tuple(tokenizer.encode(render_prompt(tokenizer, chat.messages),
                                        add_special_tokens=False))
    by_ids = GenerationRequest(prompt_ids=prompt_ids, params=greedy)
    try:
        direct = await local.generate([chat, by_ids])
        async with serving(create_app(local, MODEL)) as url:
            async with client(url) as remote:
                [served_chat] = await remote.generate([chat])
            async with client(url, mode="completions") as remote:
                [served_ids] = await remote.generate([by_ids])
    finally:
        await local.aclose()
    for served, want in ((served_chat, direct[0]), (served_ids, direct[1])):
        assert served.prompt_ids == want.prompt_ids == prompt_ids
        assert served.completion_ids == want.completion_ids and served.text == want.text
        assert served.logprobs == pytest.approx(want.logprobs, abs=1e-5)
        assert served.tokens() is not None
