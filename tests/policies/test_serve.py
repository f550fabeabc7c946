"""The OpenAI-compatible server (agentgym.serve) in front of a canned policy, over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestClient, TestServer

from agentgym.errors import ConfigError
from agentgym.parsing import parse_tool_calls
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.serve import create_app, serve
from agentgym.types import Message, ToolCall, ToolSpec

MODEL = "canned"
READY_S = 60.0  # generous: a server's start on a busy machine
CALL_TEXT = 'Let me add.<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
ADD = ToolSpec("add", "Add two numbers.", {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "integer"}}})


class CharTokenizer:
    """One token per character (id = code point); BOS is id 1."""

    chat_template = None  # no native tools: prompting writes them into the system message

    def apply_chat_template(self, chat: list[dict], tokenize: bool = False,
                            add_generation_prompt: bool = True, **_: object) -> str:
        text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in chat)
        return text + ("<|assistant|>" if add_generation_prompt else "")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([1] if add_special_tokens else []) + [ord(c) for c in text]

    def decode(self, ids: Sequence[int], **_: object) -> str:
        return "".join(chr(i) for i in ids if i > 1)


class CannedPolicy:
    """Replies ``reply`` to everything, with exact fake ids and log-probs; records requests."""

    def __init__(self, reply: str = "hello", tokenizer: object = None,
                 finish_reason: str = "stop", error: Exception | None = None) -> None:
        self.reply, self.tokenizer, self.finish_reason, self.error = (
            reply, tokenizer, finish_reason, error)
        self.requests: list[GenerationRequest] = []

    def expected(self, request: GenerationRequest) -> Completion:
        ids = tuple(ord(c) for c in self.reply)
        prompt = request.prompt_ids or tuple(range(2, 2 + 3 * len(request.messages)))
        # Log-probs with long binary expansions: JSON must carry them bit for bit.
        logprobs = tuple(-(i + 1) / 3 for i in range(len(ids)))
        return Completion(self.reply, prompt, ids, logprobs, self.finish_reason)  # type: ignore[arg-type]

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self.requests.extend(requests)
        if self.error is not None:
            raise self.error
        return [self.expected(r) for r in requests]

    async def aclose(self) -> None:
        pass


async def _client(policy: CannedPolicy) -> TestClient:
    client = TestClient(TestServer(create_app(policy, MODEL)))
    await client.start_server()
    return client


@pytest.fixture
async def canned():
    policy = CannedPolicy(tokenizer=CharTokenizer())
    client = await _client(policy)
    yield policy, client
    await client.close()


async def test_models_and_health(canned):
    _, client = canned
    models = await (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert (await client.get("/health")).status == 200


async def test_chat_returns_text_ids_and_logprobs(canned):
    policy, client = canned
    resp = await client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logprobs": True,
        "temperature": 0, "top_p": 0.5, "max_tokens": 7, "stop": "\n", "seed": 3})
    assert resp.status == 200
    data = await resp.json()
    expected = policy.expected(policy.requests[0])
    choice = data["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "hello"}
    assert choice["finish_reason"] == "stop"
    assert choice["token_ids"] == list(expected.completion_ids)
    assert data["prompt_token_ids"] == list(expected.prompt_ids)
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == list(expected.logprobs)
    assert "".join(e["token"] for e in choice["logprobs"]["content"]) == "hello"
    assert data["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert policy.requests[0].messages == (Message("user", "hi"),)
    assert policy.requests[0].params == SamplingParams(0.0, 0.5, 7, ("\n",), 3)


async def test_chat_without_logprobs_request_has_none(canned):
    _, client = canned
    data = await (await client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}]})).json()
    assert data["choices"][0]["logprobs"] is None


async def test_chat_parses_tool_calls_when_tools_are_given():
    policy = CannedPolicy(CALL_TEXT)
    client = await _client(policy)
    try:
        body = {"messages": [{"role": "user", "content": "1+2?"}], "tools": [ADD.to_openai()]}
        data = await (await client.post("/v1/chat/completions", json=body)).json()
        choice = data["choices"][0]
        assert choice["message"]["content"] == CALL_TEXT  # raw text, as sampled
        assert choice["finish_reason"] == "tool_calls"
        [call] = choice["message"]["tool_calls"]
        assert call["type"] == "function" and call["function"]["name"] == "add"
        assert json.loads(call["function"]["arguments"]) == {"a": 1, "b": 2}
        assert policy.requests[0].tools == (ADD,)
        # Without tools (or with tool_choice "none") the text is not parsed.
        for extra in ({"tools": None}, {"tool_choice": "none"}):
            data = await (await client.post("/v1/chat/completions",
                                            json={**body, **extra})).json()
            assert "tool_calls" not in data["choices"][0]["message"]
            assert data["choices"][0]["finish_reason"] == "stop"
    finally:
        await client.close()


async def test_incoming_messages_keep_calls_and_drop_echoed_ones(canned):
    policy, client = canned
    call = {"id": "c1", "type": "function",
            "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"},
        {"role": "assistant", "content": CALL_TEXT, "tool_calls": [call]},  # an echo
    ]
    resp = await client.post("/v1/chat/completions", json={"messages": messages})
    assert resp.status == 200
    assert policy.requests[0].messages == (
        Message("system", "be brief"),
        Message("assistant", "", (ToolCall("c1", "add", {"a": 1, "b": 2}),)),
        Message("tool", "3", tool_call_id="c1", name="add"),
        Message("assistant", CALL_TEXT),
    )


async def test_completions_with_ids_and_text(canned):
    policy, client = canned
    data = await (await client.post("/v1/completions", json={
        "prompt": [5, 6, 7], "logprobs": 1, "max_tokens": 4})).json()
    choice = data["choices"][0]
    assert policy.requests[0].prompt_ids == (5, 6, 7)
    assert choice["prompt_token_ids"] == [5, 6, 7]
    assert choice["text"] == "hello" and choice["token_ids"] == [ord(c) for c in "hello"]
    assert choice["logprobs"]["tokens"] == list("hello")
    assert choice["logprobs"]["token_logprobs"] == [-(i + 1) / 3 for i in range(5)]
    assert choice["logprobs"]["text_offset"] == [0, 1, 2, 3, 4]
    # A text prompt is tokenized with the policy's tokenizer (BOS added, as vLLM does).
    await client.post("/v1/completions", json={"prompt": "ab"})
    await client.post("/v1/completions", json={"prompt": ["ab"], "add_special_tokens": False})
    assert [r.prompt_ids for r in policy.requests[1:]] == [(1, 97, 98), (97, 98)]


async def test_text_prompt_without_tokenizer_is_a_bad_request():
    client = await _client(CannedPolicy())
    try:
        resp = await client.post("/v1/completions", json={"prompt": "hi"})
        assert resp.status == 400
        assert "tokenizer" in (await resp.json())["error"]["message"]
    finally:
        await client.close()


@pytest.mark.parametrize(("path", "body", "status", "needle"), [
    ("/v1/chat/completions", b"{not json", 400, "not valid JSON"),
    ("/v1/chat/completions", b"[1, 2]", 400, "JSON object"),
    ("/v1/chat/completions", {}, 400, "'messages'"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "'messages'"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400, "content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "temperature": "hot"}, 400, "temperature"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "top_p": 2}, 400, "top_p"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 0}, 400,
     "'n' must be in [1, 64]"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "stream_options": {"include_usage": True}}, 400,
     "only allowed with 'stream': true"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": True,
                              "stream_options": {"include_usage": 1}}, 400, "boolean"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "top_logprobs": 2}, 400, "needs 'logprobs': true"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "tools": [{"function": {}}]}, 400, "tools"),
    ("/v1/chat/completions", {"model": "gpt-9", "messages": []}, 404, "gpt-9"),
    ("/v1/completions", {"prompt": [[1], [2]]}, 400, "'prompt'"),
    ("/v1/completions", {"prompt": []}, 400, "empty"),
    ("/v1/completions", {"prompt": [1], "echo": True}, 400, "echo"),
    ("/v1/embeddings", {}, 404, "/v1/embeddings"),
])
async def test_bad_requests_get_openai_style_errors(canned, path, body, status, needle):
    policy, client = canned
    kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
    resp = await client.post(path, **kwargs)
    assert resp.status == status
    error = (await resp.json())["error"]
    assert needle in error["message"]
    assert error["type"] == "invalid_request_error"
    assert policy.requests == []


async def test_policy_failure_is_a_500_with_the_message():
    client = await _client(CannedPolicy(error=RuntimeError("CUDA out of memory")))
    try:
        resp = await client.post("/v1/chat/completions",
                                 json={"messages": [{"role": "user", "content": "x"}]})
        assert resp.status == 500
        error = (await resp.json())["error"]
        assert "CUDA out of memory" in error["message"] and error["type"] == "server_error"
    finally:
        await client.close()


async def test_policy_config_error_is_a_400():
    client = await _client(CannedPolicy(error=ConfigError("prompt has 9000 tokens; max 2048")))
    try:
        resp = await client.post("/v1/completions", json={"prompt": [1, 2]})
        assert resp.status == 400
        assert "9000 tokens" in (await resp.json())["error"]["message"]
    finally:
        await client.close()


async def test_serve_binds_loopback_and_stops_on_cancel():
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(CannedPolicy(), port=0, model_name=MODEL,
                                     on_ready=ready.set_result))
    try:
        # Readiness, not a fixed time: a busy machine may take long to bind.
        done, _ = await asyncio.wait({ready, task}, timeout=READY_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert ready in done, f"the server did not start in {READY_S} s"
        url = ready.result()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        async with ClientSession() as session, session.get(f"{url}/models") as resp:
            assert (await resp.json())["data"][0]["id"] == MODEL
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_parsed_calls_match_what_the_server_returns():
    # The server and the env read calls with the same parser: same names and arguments.
    assert parse_tool_calls(CALL_TEXT).calls == (ToolCall("call_0", "add", {"a": 1, "b": 2}),)
