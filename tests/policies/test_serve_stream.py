"""agentgym serve streams (server-sent events, as the OpenAI API does), answers ``n`` choices
with ``top_logprobs``, and frees a row whose streaming client left: canned policies over real
HTTP, the transformers backend in-process, and the real ``agentgym serve`` read by the official
``openai`` client."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import ClientResponse, ClientSession
from aiohttp.test_utils import TestClient, TestServer
from process_fixtures import Started, end_group, wait_until

from agentgym.errors import ConfigError
from agentgym.policies.base import Completion, GenerationRequest, SampledToken
from agentgym.serve import create_app

from .test_serve import ADD, CALL_TEXT, MODEL, CannedPolicy, CharTokenizer

CHAT, COMP = "/v1/chat/completions", "/v1/completions"
USER = [{"role": "user", "content": "hi"}]


class FeedingPolicy(CannedPolicy):
    """A canned policy that tells each request's ``on_token`` of every token as it 'samples'
    it (alternatives: the token itself, then ids above it), failing after ``fail_after``."""

    def __init__(self, reply: str = "hello", fail_after: int | None = None) -> None:
        super().__init__(reply, CharTokenizer())
        self.fail_after = fail_after

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self.requests.extend(requests)
        out = [self.expected(r) for r in requests]
        for k in range(len(self.reply)):
            for r, done in zip(requests, out, strict=True):
                if k == self.fail_after:
                    raise RuntimeError("the accelerator fell off the bus")
                tok, lp = done.completion_ids[k], done.logprobs[k]
                if r.on_token is not None:
                    r.on_token(SampledToken(done.prompt_ids, tok, lp, tuple(
                        (tok + j, lp - j) for j in range(r.params.top_logprobs))))
            await asyncio.sleep(0.001)  # the server writes chunks meanwhile
        return out


async def client_for(policy: CannedPolicy) -> TestClient:
    client = TestClient(TestServer(create_app(policy, MODEL)))
    await client.start_server()
    return client


async def events(resp: ClientResponse) -> list[Any]:
    """The ``data:`` payloads of a server-sent event stream ("[DONE]" kept as a string)."""
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    out = []
    for block in (await resp.read()).decode().split("\n\n"):
        if block:
            assert block.startswith("data: "), block
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def by_choice(chunks: list[dict[str, Any]], field: str) -> dict[int, list[Any]]:
    """Per choice index, ``field`` of each of its chunk choices, in order."""
    out: dict[int, list[Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            out.setdefault(choice["index"], []).append(choice.get(field))
    return out


async def test_streamed_chat_adds_up_to_the_whole_reply() -> None:
    policy = FeedingPolicy()
    client = await client_for(policy)
    try:
        body = {"messages": USER, "n": 2, "seed": 5, "logprobs": True, "top_logprobs": 2}
        whole = await (await client.post(CHAT, json=body)).json()
        got = await events(await client.post(CHAT, json={
            **body, "stream": True, "stream_options": {"include_usage": True}}))
    finally:
        await client.close()
    assert got[-1] == "[DONE]"
    chunks, usage = got[:-2], got[-2]
    assert usage["choices"] == [] and usage["usage"] == whole["usage"] == {
        "prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
    assert {c["id"] for c in got[:-1]} == {usage["id"]}
    assert all(c["object"] == "chat.completion.chunk" and c["usage"] is None for c in chunks)
    deltas = by_choice(chunks, "delta")
    assert sorted(deltas) == [0, 1]
    for index, choice in enumerate(whole["choices"]):
        assert deltas[index][0] == {"role": "assistant", "content": ""}
        assert "".join(d.get("content") or "" for d in deltas[index]) == \
            choice["message"]["content"] == "hello"
        ids = [i for part in by_choice(chunks, "token_ids")[index] if part for i in part]
        assert ids == choice["token_ids"]
        entries = [e for lp in by_choice(chunks, "logprobs")[index] if lp
                   for e in lp["content"]]
        assert entries == choice["logprobs"]["content"]
        assert [len(e["top_logprobs"]) for e in entries] == [2] * 5
        assert entries[0]["top_logprobs"][1] == {"token": "i", "logprob": -1 / 3 - 1,
                                                 "bytes": [105]}
        assert by_choice(chunks, "finish_reason")[index][-1] == choice["finish_reason"] == "stop"
    first = next(c for c in chunks if c["choices"][0]["index"] == 0)
    assert first["prompt_token_ids"] == whole["prompt_token_ids"] == [2, 3, 4]
    # Two choices of one seeded request: seeds 5 and 6, in both forms of the request.
    assert [r.params.seed for r in policy.requests] == [5, 6, 5, 6]
    assert {r.params.top_logprobs for r in policy.requests} == {2}


async def test_streamed_completion_from_a_policy_without_the_hook() -> None:
    policy = CannedPolicy(tokenizer=CharTokenizer())  # tells no on_token: all comes at the end
    client = await client_for(policy)
    try:
        got = await events(await client.post(COMP, json={
            "prompt": [5, 6], "stream": True, "logprobs": 0, "max_tokens": 5}))
    finally:
        await client.close()
    assert got[-1] == "[DONE]"
    chunks = got[:-1]
    assert all(c["object"] == "text_completion" and "usage" not in c for c in chunks)
    assert "".join(by_choice(chunks, "text")[0]) == "hello"
    assert chunks[0]["choices"][0]["prompt_token_ids"] == [5, 6]
    assert [i for part in by_choice(chunks, "token_ids")[0] if part for i in part] == \
        [ord(c) for c in "hello"]
    [logprobs] = [lp for lp in by_choice(chunks, "logprobs")[0] if lp]
    assert logprobs["tokens"] == list("hello") and logprobs["top_logprobs"] is None
    assert logprobs["token_logprobs"] == [-(i + 1) / 3 for i in range(5)]
    assert by_choice(chunks, "finish_reason")[0][-1] == "stop"


async def test_streamed_tool_calls_come_as_a_tool_calls_delta() -> None:
    client = await client_for(CannedPolicy(CALL_TEXT))
    try:
        got = await events(await client.post(CHAT, json={
            "messages": USER, "tools": [ADD.to_openai()], "stream": True}))
    finally:
        await client.close()
    deltas = by_choice(got[:-1], "delta")[0]
    assert "".join(d.get("content") or "" for d in deltas) == CALL_TEXT
    [calls] = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert calls[0]["index"] == 0 and calls[0]["function"]["name"] == "add"
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert by_choice(got[:-1], "finish_reason")[0][-1] == "tool_calls"


async def test_completions_answer_n_choices_with_top_logprobs() -> None:
    policy = FeedingPolicy("ab")
    client = await client_for(policy)
    try:
        data = await (await client.post(COMP, json={"prompt": [7], "n": 3, "logprobs": 2,
                                                    "seed": 2**64 - 2})).json()
    finally:
        await client.close()
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    top = data["choices"][2]["logprobs"]["top_logprobs"]
    assert top == [{"a": -1 / 3, "b": -1 / 3 - 1}, {"b": -2 / 3, "c": -2 / 3 - 1}]
    assert data["usage"] == {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}
    assert [r.params.seed for r in policy.requests] == [2**64 - 2, 2**64 - 1, 0]


@pytest.mark.parametrize(("error", "status"), [
    (ConfigError("the prompt has 9000 tokens but the model's context is 2048"), 400),
    (RuntimeError("CUDA out of memory"), 500)])
async def test_a_stream_refused_before_its_first_token_is_a_plain_error(error, status) -> None:
    client = await client_for(CannedPolicy(error=error))
    try:
        resp = await client.post(CHAT, json={"messages": USER, "stream": True})
        assert resp.status == status and resp.content_type == "application/json"
        assert str(error) in (await resp.json())["error"]["message"]
    finally:
        await client.close()


async def test_a_fault_mid_stream_is_an_error_event_then_done(caplog) -> None:
    caplog.set_level(logging.INFO)
    client = await client_for(FeedingPolicy(fail_after=2))
    try:
        got = await events(await client.post(COMP, json={"prompt": [5], "stream": True}))
        assert (await client.get("/health")).status == 200
    finally:
        await client.close()
    assert "".join(c["choices"][0]["text"] for c in got[:-2]) == "he"
    assert got[-2]["error"]["code"] == 500 and "fell off the bus" in got[-2]["error"]["message"]
    assert got[-1] == "[DONE]"
    assert any(r.exc_info for r in caplog.records)  # a server fault: logged with its traceback


# -- the transformers backend, in-process ------------------------------------------------------


async def test_a_client_that_leaves_a_stream_frees_its_row(model: Any, tokenizer: Any) -> None:
    from agentgym.policies.hf import TransformersPolicy

    from .test_serve_fairness import LONG, endless, settled, until
    from .test_serve_hostile import running

    async with endless(TransformersPolicy(model, tokenizer, max_batch_size=1)) as policy, \
            running(policy) as (url, _):
        async with ClientSession() as session:
            resp = await session.post(url + COMP, json={
                "prompt": "talk", "max_tokens": LONG, "temperature": 1.0, "stream": True})
            assert resp.status == 200
            for _ in range(3):  # a few chunks arrive as they are sampled
                assert (await resp.content.readline()).startswith(b"data: {")
                await resp.content.readline()
            await until(lambda: policy.stats.completion_tokens >= 3, "decoding")
            resp.close()  # the client leaves mid-stream
        assert await settled(policy) < LONG
        # Its row is free: with one row in all, the next request is served.
        async with ClientSession() as session, session.post(url + COMP, json={
                "prompt": "hi", "max_tokens": 4}) as resp:
            assert resp.status == 200
            assert len((await resp.json())["choices"][0]["token_ids"]) == 4


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer: Any) -> Any:
    import copy

    return copy.deepcopy(smollm2_tokenizer)


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    pytest.importorskip("torch")
    from agentgym.policies.models import tiny_model

    return tiny_model(tokenizer=tokenizer, seed=5)


# -- the real server, read by the openai client ---------------------------------------------

SERVING = re.compile(r"serving .* at (http://127\.0\.0\.1:\d+/v1)")


@pytest.fixture(scope="module")
def served(tiny_model_dir: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An OpenAI client of ``agentgym serve`` on the tiny model (a subprocess, always ended)."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("torch")
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from agentgym.cli import main; main()", "serve",
             str(tiny_model_dir), "--port", "0", "--model-name", "tiny"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"},
            start_new_session=True)
    started = Started(proc, log)
    try:
        wait_until(lambda: SERVING.search(started.output()) is not None, "'serving' line",
                   started)
        url = SERVING.search(started.output()).group(1)  # type: ignore[union-attr]
        with openai.OpenAI(base_url=url, api_key="none", timeout=300, max_retries=0) as client:
            yield client
    finally:
        end_group(proc)


def close(a: Sequence[float], b: Sequence[float]) -> bool:
    """Log-probs of the same tokens, computed in two calls (one may use cached keys)."""
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=1e-4)
                                    for x, y in zip(a, b, strict=True))


def test_openai_streams_chat_as_the_whole_reply(served: Any) -> None:
    kwargs = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me a story."}],
              "max_tokens": 24, "temperature": 1.0, "seed": 7, "n": 2, "logprobs": True,
              "top_logprobs": 3}
    whole = served.chat.completions.create(**kwargs).model_dump()
    chunks = [c.model_dump() for c in served.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True})]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == \
        whole["usage"]["completion_tokens"]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    streamed: dict[int, dict[str, Any]] = {}
    for chunk in chunks[:-1]:
        for choice in chunk["choices"]:
            got = streamed.setdefault(choice["index"], {"text": "", "ids": [], "lp": []})
            got["text"] += choice["delta"]["content"] or ""
            got["ids"] += choice.get("token_ids") or []
            got["lp"] += (choice["logprobs"] or {}).get("content") or []
            got["finish"] = choice["finish_reason"] or got.get("finish")
    assert sorted(streamed) == [0, 1]
    for choice in whole["choices"]:
        got = streamed[choice["index"]]
        assert got["text"] == choice["message"]["content"]  # UTF-8 pieces joined exactly
        assert got["ids"] == choice["token_ids"] and got["finish"] == choice["finish_reason"]
        entries = choice["logprobs"]["content"]
        assert close([e["logprob"] for e in got["lp"]], [e["logprob"] for e in entries])
        for entry in got["lp"]:  # the 3 likeliest, likeliest first, of the same distribution
            top = [t["logprob"] for t in entry["top_logprobs"]]
            assert len(top) == 3 and top == sorted(top, reverse=True)
            assert entry["logprob"] <= top[0] + 1e-6
    assert whole["choices"][0]["token_ids"] != whole["choices"][1]["token_ids"]
    # Choice 0 of a seeded request is what the same request with n=1 samples.
    one = served.chat.completions.create(**{**kwargs, "n": 1}).model_dump()
    assert one["choices"][0]["token_ids"] == whole["choices"][0]["token_ids"]


def test_openai_streams_completions_and_stops_at_a_stop_string(served: Any) -> None:
    kwargs = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 30,
              "temperature": 1.0, "seed": 3, "logprobs": 2}
    whole = served.completions.create(**kwargs).model_dump()["choices"][0]
    words = [w for w in whole["logprobs"]["tokens"][2:-1] if w.strip().isalnum() and len(w) > 1]
    assert words, whole["logprobs"]["tokens"]
    stop = words[0]
    chunks = [c.model_dump() for c in served.completions.create(**kwargs, stream=True,
                                                                 stop=[stop])]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    ids = [i for c in chunks for i in c["choices"][0].get("token_ids") or []]
    assert stop in text and whole["text"].startswith(text)  # same seed, cut at the stop
    assert ids == whole["token_ids"][:len(ids)] and len(ids) < len(whole["token_ids"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    tops = [t for c in chunks for t in (c["choices"][0]["logprobs"] or {}).get(
        "top_logprobs") or []]
    assert len(tops) == len(ids) and all(1 <= len(t) <= 3 for t in tops)
