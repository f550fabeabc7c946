"""agentgym serve with the transformers backend: a client that leaves stops its decoding, a short
request joins a long one being decoded (token-exact), and big prompts stay off the event loop."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from typing import Any

import pytest

pytest.importorskip("torch")

from aiohttp import ClientSession  # noqa: E402

from agentgym import Message  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from agentgym.policies import hf  # noqa: E402
from agentgym.policies.base import GenerationRequest, SamplingParams  # noqa: E402
from agentgym.policies.hf import TransformersPolicy  # noqa: E402
from agentgym.policies.models import tiny_model  # noqa: E402

from .test_hf import assert_rescored  # noqa: E402
from .test_serve_hostile import BOUND_S, running  # noqa: E402

LONG = 1500  # tokens of a long completion (it is cut short by its client)
JOINED = 400  # tokens of a long completion that runs to its end: 100 times the short one


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer: Any) -> Any:
    return copy.deepcopy(smollm2_tokenizer)


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    return tiny_model(tokenizer=tokenizer, seed=5)


def endless(policy: TransformersPolicy) -> TransformersPolicy:
    policy.eos_ids = frozenset()  # rows end at max_tokens only: lengths are known
    return policy


def req(text: str, max_tokens: int, **params: Any) -> GenerationRequest:
    return GenerationRequest((Message("user", text),),
                             params=SamplingParams(max_tokens=max_tokens, **params))


async def until(condition: Any, what: str) -> None:
    for _ in range(int(BOUND_S / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what} did not happen in {BOUND_S} s")


async def settled(policy: TransformersPolicy) -> int:
    """The policy's completion-token count once it stops growing (nothing decodes)."""
    last = -1
    for _ in range(int(BOUND_S / 0.3)):
        now = policy.stats.completion_tokens
        if now == last:
            return now
        last = now
        await asyncio.sleep(0.3)
    raise AssertionError(f"decoding went on for {BOUND_S} s")


async def test_a_client_that_disconnects_stops_its_decoding(model: Any, tokenizer: Any) -> None:
    async with endless(TransformersPolicy(model, tokenizer, max_batch_size=1)) as policy, \
            running(policy) as (url, port):
        body = json.dumps({"prompt": "talk", "max_tokens": LONG, "temperature": 1.0}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await until(lambda: policy.stats.completion_tokens >= 5, "decoding")
        writer.close()  # the client leaves mid-completion
        assert await settled(policy) < LONG
        # Its row is free: with one row in all, the next request is served.
        async with ClientSession() as session, session.post(url + "/v1/completions", json={
                "prompt": "hi", "max_tokens": 4}) as resp:
            assert resp.status == 200
            assert len((await resp.json())["choices"][0]["token_ids"]) == 4


async def test_a_short_request_joins_a_long_one_being_decoded(model: Any, tokenizer: Any
                                                              ) -> None:
    greedy = {"temperature": 0.0}
    async with endless(TransformersPolicy(model, tokenizer)) as alone:
        [expected] = await alone.generate([req("What is 6*7?", 4, **greedy)])
    async with endless(TransformersPolicy(model, tokenizer)) as policy:
        long = asyncio.create_task(policy.generate([req("talk", JOINED, temperature=0.9,
                                                        seed=1)]))
        await until(lambda: policy.stats.completion_tokens >= 5, "decoding")
        [short] = await policy.generate([req("What is 6*7?", 4, **greedy)])
        assert not long.done()  # it did not wait for the long completion
        assert policy.stats.joined == 1 and policy.stats.batches == 1
        [whole] = await long
    # Joining changes neither row: same greedy tokens, log-probs of one plain forward pass.
    assert short.completion_ids == expected.completion_ids
    assert len(whole.completion_ids) == JOINED
    assert_rescored(model, [short, whole], [0.0, 0.9])


async def test_no_request_joins_while_a_weight_update_waits(model: Any, tokenizer: Any
                                                           ) -> None:
    import torch

    own = copy.deepcopy(model)
    async with endless(TransformersPolicy(own, tokenizer)) as policy:
        long = asyncio.create_task(policy.generate([req("talk", 300, temperature=1.0)]))
        await until(lambda: policy.stats.completion_tokens >= 5, "decoding")
        update = asyncio.create_task(policy.update_weights(
            {"lm_head.weight": torch.zeros_like(own.lm_head.weight)}))
        await asyncio.sleep(0.05)  # the update now waits for the batch in progress
        [short] = await policy.generate([req("hi", 3, temperature=0.0)])
        [first] = await long
        assert await update == 1
    assert first.policy_version == 0 and short.policy_version == 1
    assert short.completion_ids == (0, 0, 0)  # every logit is 0 under the new weights


async def test_a_long_chat_prompt_is_rendered_off_the_event_loop(
        model: Any, tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendering blocks until the event loop has run a step: on the loop it never could."""
    stepped, waited = threading.Event(), []
    plain = hf.render_prompt

    def gated(*args: Any) -> str:
        waited.append(stepped.wait(BOUND_S))
        return plain(*args)

    monkeypatch.setattr(hf, "render_prompt", gated)
    async with TransformersPolicy(model, tokenizer) as policy:
        call = asyncio.create_task(policy.generate([req("word " * 10_000, 2)]))
        await asyncio.sleep(0.01)
        stepped.set()
        with pytest.raises(ConfigError, match="context is 4096"):
            await call
    assert waited == [True]


async def test_a_prompt_that_cannot_fit_is_refused_before_tokenizing(
        model: Any, tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer) as policy:
        limit = policy.prompt_char_limit
        assert limit is not None and limit >= 4096
        with pytest.raises(ConfigError, match="characters, more than the model's context"):
            await policy.generate([req("x" * (limit + 1), 2)])
        async with running(policy) as (url, _), ClientSession() as session:
            for path, body, param in [
                    ("/v1/completions", {"prompt": "x" * (limit + 1)}, "prompt"),
                    ("/v1/chat/completions", {"messages": [
                        {"role": "user", "content": "x" * (limit + 1)}]}, "messages")]:
                async with session.post(url + path, json=body) as resp:
                    assert resp.status == 400
                    assert (await resp.json())["error"]["param"] == param
            # A body that cannot fit the context even as escaped text is not even read.
            async with session.post(url + "/v1/completions", data=b"x" * (12 * limit + 2**21),
                                    headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == 413
                assert "cannot fit the model's context" in (await resp.json())["error"]["message"]
        with pytest.raises(ConfigError, match="seed must be an integer"):
            await policy.generate([req("hi", 2, seed=2**70)])


def test_a_join_reserves_room_for_the_next_tokens_only(model: Any, tokenizer: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A row far from its end does not make each join allocate its whole remaining length
    (it would be copied at every join); the cache grows by half when the reserve runs out."""
    import torch

    from agentgym.policies import kv_cache
    from agentgym.policies.decoding import BatchDecoder, Job
    from agentgym.policies.models import prepare_tokenizer

    reserved: list[int] = []
    plain = kv_cache.GrowingLayer.merge

    def merge(self: Any, other: Any, width: int, capacity: int) -> None:
        reserved.append(capacity - width)
        plain(self, other, width, capacity)

    monkeypatch.setattr(kv_cache.GrowingLayer, "merge", merge)
    tok = prepare_tokenizer(copy.deepcopy(tokenizer))
    decoder = BatchDecoder(model, tok, kv_cache.PrefixStore(0))
    decoder.eos_ids = frozenset()
    greedy = {"temperature": 0.0}
    long = Job(tuple(tok("talk")["input_ids"]), SamplingParams(max_tokens=3000, **greedy), None)
    short = Job(tuple(tok("hi there")["input_ids"]), SamplingParams(max_tokens=4, **greedy),
                None)
    queue = [short]

    def admit(room: int) -> list[Job]:
        if not queue:
            long.cancelled = True  # the join happened: no need to decode 3000 tokens
        taken, queue[:] = queue[:room], queue[room:]
        return taken

    with torch.inference_mode():
        done = decoder.run([long], 0, admit=admit, max_rows=2)
    assert decoder.stats.joined == 1 and len(done[1].completion_ids) == 4
    assert reserved and max(reserved) <= 256  # before: 2999 columns for the long row
