"""TransformersPolicy's prefix cache across calls, stoppable decoding and thread count."""

from __future__ import annotations

import asyncio
import copy
import os
import time
from typing import Any

import pytest

pytest.importorskip("torch")

from agentgym import Message  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from agentgym.policies import hf  # noqa: E402
from agentgym.policies.base import GenerationRequest, SamplingParams  # noqa: E402
from agentgym.policies.hf import TransformersPolicy, machine_threads  # noqa: E402
from agentgym.policies.kv_cache import PrefixStore  # noqa: E402
from agentgym.policies.models import tiny_model  # noqa: E402

from .test_hf import assert_rescored  # noqa: E402

SYSTEM = Message("system", "You push boxes onto targets. Tools: up, down, left, right. " * 3)
GREEDY = SamplingParams(temperature=0.0, max_tokens=6)


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer: Any) -> Any:
    return copy.deepcopy(smollm2_tokenizer)


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    return tiny_model(tokenizer=tokenizer, seed=3)


async def play(policy: TransformersPolicy, tokenizer: Any, episodes: int, turns: int
               ) -> list[list[tuple[int, ...]]]:
    """Full-history episodes, all in flight at once: each prompt extends the last turn."""

    async def episode(e: int) -> list[tuple[int, ...]]:
        prompt = tuple(tokenizer(f"<|im_start|>system\n{SYSTEM.content}<|im_end|>\n<|im_start|>"
                                 f"user\nboard {e}<|im_end|>\n", add_special_tokens=False)
                       ["input_ids"])
        outs = []
        for t in range(turns):
            [c] = await policy.generate([GenerationRequest(prompt_ids=prompt, params=GREEDY)])
            outs.append(c.completion_ids)
            observation = tokenizer(f"<|im_start|>user\nmoved {t}<|im_end|>\n",
                                    add_special_tokens=False)["input_ids"]
            prompt = c.prompt_ids + c.completion_ids + tuple(observation)
        return outs

    return list(await asyncio.gather(*(episode(e) for e in range(episodes))))


async def test_greedy_outputs_are_identical_with_and_without_the_cache(
        model: Any, tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer, prefix_cache_mb=0) as plain:
        expected = await play(plain, tokenizer, episodes=3, turns=4)
        plain_prefill = plain.stats.prefill_tokens
    async with TransformersPolicy(model, tokenizer) as cached:
        got = await play(cached, tokenizer, episodes=3, turns=4)
        assert got == expected
        # Turns 2..4 run only the new tokens: less than half of the prefill without it.
        assert cached.stats.prefill_tokens < plain_prefill / 2
        assert cached.stats.cached_tokens > plain_prefill / 2
        assert cached.prefix_store.stats.entries_added > 0


async def test_cached_logprobs_match_rescoring(model: Any, tokenizer: Any) -> None:
    params = SamplingParams(temperature=0.8, max_tokens=5, seed=7)
    async with TransformersPolicy(model, tokenizer) as policy:
        [first] = await policy.generate([GenerationRequest((SYSTEM, Message("user", "go")),
                                                           params=params)])
        follow = first.prompt_ids + first.completion_ids + (28, 29, 30)
        [second] = await policy.generate([GenerationRequest(prompt_ids=follow, params=params)])
        assert policy.stats.cached_tokens >= len(first.prompt_ids)
        assert_rescored(model, [first, second], [0.8, 0.8])


async def test_a_weight_update_empties_the_cache(tokenizer: Any) -> None:
    import torch

    model = tiny_model(tokenizer=tokenizer, seed=4)
    request = GenerationRequest((SYSTEM, Message("user", "go")), params=GREEDY)
    async with TransformersPolicy(model, tokenizer) as policy:
        await policy.generate([request])
        assert len(policy.prefix_store) > 0
        policy.load_weights({"lm_head.weight": torch.zeros_like(model.lm_head.weight)})
        assert len(policy.prefix_store) == 0
        [after] = await policy.generate([request])
        assert after.completion_ids == (0,) * 6  # the new weights, not stale keys and values


def test_store_keeps_its_budget_and_the_longest_match() -> None:
    import torch

    def kv(n: int) -> list[torch.Tensor]:
        return [torch.zeros(2, n, 4)]  # one layer, (H, L, D): 32 bytes a token

    store = PrefixStore(budget_bytes=32 * 2 * 10)  # 10 tokens of keys + values
    store.add([1, 2, 3], kv(3), kv(3), version=0)
    store.add([1, 2, 3, 4, 5], kv(5), kv(5), version=0)  # covers the first: it is dropped
    assert len(store) == 1
    entry, n = store.lookup([1, 2, 3, 9], limit=4, version=0)
    assert n == 3 and entry is not None and list(entry.ids) == [1, 2, 3, 4, 5]
    assert store.lookup([1, 2, 3], limit=4, version=1) == (None, 0)  # other weights
    store.add([7, 8, 9, 10, 11, 12], kv(6), kv(6), version=0)  # 11 tokens > budget
    assert len(store) == 1 and store.stats.evictions == 1 and store.nbytes <= store.budget_bytes


async def decoding(policy: TransformersPolicy) -> None:
    """Return once the policy has decoded a few tokens."""
    for _ in range(1000):
        if policy.stats.completion_tokens >= 5:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no token was decoded in 10 s")


async def test_a_cancelled_request_stops_decoding(model: Any, tokenizer: Any) -> None:
    long = SamplingParams(temperature=1.0, max_tokens=3000, seed=0)
    async with TransformersPolicy(model, tokenizer) as policy:
        call = asyncio.create_task(policy.generate([GenerationRequest(
            (Message("user", "talk"),), params=long)]))
        await decoding(policy)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(0.3)  # the decoder notices at its next token
        tokens = policy.stats.completion_tokens
        await asyncio.sleep(0.3)
        assert policy.stats.completion_tokens == tokens < 3000  # nothing decodes any more


async def test_a_step_timeout_stops_decoding(model: Any, tokenizer: Any) -> None:
    long = SamplingParams(temperature=1.0, max_tokens=3000, seed=0)
    async with TransformersPolicy(model, tokenizer) as policy:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await policy.generate([GenerationRequest((Message("user", "talk"),),
                                                         params=long)])
        tokens = policy.stats.completion_tokens
        await asyncio.sleep(0.3)
        assert policy.stats.completion_tokens - tokens <= 1 and tokens < 3000


async def test_aclose_stops_the_batch_in_progress(model: Any, tokenizer: Any) -> None:
    long = SamplingParams(temperature=1.0, max_tokens=3000, seed=0)
    policy = TransformersPolicy(model, tokenizer)
    call = asyncio.create_task(policy.generate([GenerationRequest((Message("user", "x"),),
                                                                  params=long)]))
    await decoding(policy)
    start = time.perf_counter()
    await policy.aclose()
    assert time.perf_counter() - start < 1.0
    with pytest.raises(Exception, match="closed"):
        await call
    assert policy.stats.completion_tokens < 3000


def test_thread_count_fits_the_machine(model: Any, tokenizer: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    cpus = len(os.sched_getaffinity(0))
    monkeypatch.setattr(hf, "busy_cpus", lambda: 0.0)
    assert machine_threads() == cpus  # idle: every CPU
    monkeypatch.setattr(hf, "busy_cpus", lambda: 30.0)
    assert machine_threads() == 1  # oversubscribed by others: one thread
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(cpus + 3)
        TransformersPolicy(model, tokenizer)
        assert torch.get_num_threads() == 1
        TransformersPolicy(model, tokenizer, threads=2)
        assert torch.get_num_threads() == 2
        with pytest.raises(ConfigError, match="threads must be"):
            TransformersPolicy(model, tokenizer, threads=0)
        with pytest.raises(ConfigError, match="prefix_cache_mb"):
            TransformersPolicy(model, tokenizer, prefix_cache_mb=-1)
    finally:
        torch.set_num_threads(before)


def long_prompt(n: int) -> tuple[int, ...]:
    return tuple(100 + (i * 7919) % 5000 for i in range(n))


async def test_a_long_prompt_prefills_in_chunks_with_the_same_output(
        model: Any, tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.policies import decoding

    request = GenerationRequest(prompt_ids=long_prompt(1500), params=GREEDY)
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", 10**6)
    async with TransformersPolicy(model, tokenizer, prefix_cache_mb=0) as whole:
        [one_pass] = await whole.generate([request])
        passes = whole.stats.forward_passes
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", 512)
    async with TransformersPolicy(model, tokenizer, prefix_cache_mb=0) as chunked:
        [chunks] = await chunked.generate([request])
        assert chunked.stats.forward_passes == passes + 2  # 1500 positions: 3 passes, not 1
    assert chunks.completion_ids == one_pass.completion_ids
    assert chunks.logprobs == pytest.approx(one_pass.logprobs, abs=1e-4)


async def test_a_cancelled_request_stops_during_a_long_prefill(
        model: Any, tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the middle of a prefill of thousands of tokens: the prefill stops at the
    next chunk, long before its end, and nothing is decoded."""
    from agentgym.policies import decoding

    monkeypatch.setattr(decoding, "PREFILL_CHUNK", 4)  # 3,000 positions: 750 passes
    async with TransformersPolicy(model, tokenizer, prefix_cache_mb=0) as policy:
        call = asyncio.create_task(policy.generate([GenerationRequest(
            prompt_ids=long_prompt(3000), params=GREEDY)]))
        for _ in range(1000):
            if policy.stats.forward_passes >= 3:
                break
            await asyncio.sleep(0.005)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(0.3)
        passes = policy.stats.forward_passes
        await asyncio.sleep(0.3)
        assert policy.stats.forward_passes == passes < 750
        assert policy.stats.completion_tokens == 0


def test_busy_cpus_reads_the_cpus_busy_now_not_the_load_average(monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """A job that just ended still weighs on the one-minute load average, not on /proc/stat."""
    monkeypatch.setattr(os, "getloadavg", lambda: (1.7, 1.2, 0.9))  # the job just ended
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    # cpu line: user nice system idle iowait irq softirq steal; 100 ticks between samples
    samples = iter([[1000, 0, 100, 5000, 10, 0, 0, 0], [1010, 0, 105, 5084, 11, 0, 0, 0]])
    monkeypatch.setattr(hf, "_cpu_times", lambda: next(samples))
    own = iter([500, 500])  # this process did nothing in between
    monkeypatch.setattr(hf, "_own_ticks", lambda: next(own))
    assert hf.busy_cpus(seconds=0.0) == pytest.approx(2 * 0.15)  # 15 of 100 ticks busy
    monkeypatch.setattr(hf, "_cpu_times", lambda: (_ for _ in ()).throw(OSError("no /proc")))
    assert hf.busy_cpus(seconds=0.0) == 1.7  # no /proc/stat: the load average


def test_busy_cpus_leaves_out_this_process_own_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's own threads (loading, tokenizing) are not other work that it must fit."""
    assert hf._own_ticks() >= 0  # the real /proc/self/stat parses
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    # 100 ticks over 2 CPUs: 60 busy, 40 of them this process's (0.8 of a CPU)
    samples = iter([[1000, 0, 100, 5000, 10, 0, 0, 0], [1050, 0, 110, 5040, 10, 0, 0, 0]])
    monkeypatch.setattr(hf, "_cpu_times", lambda: next(samples))
    own = iter([500, 540])
    monkeypatch.setattr(hf, "_own_ticks", lambda: next(own))
    assert hf.busy_cpus(seconds=0.0) == pytest.approx(2 * 0.6 - 0.8)


def test_fit_threads_follows_the_machine_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """An update refits torch's threads: one busy CPU costs a thread only while it is busy."""
    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(hf, "allowed_cpus", lambda: 2)
    try:
        monkeypatch.setattr(hf, "busy_cpus", lambda: 1.0)
        assert hf.fit_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.setattr(hf, "busy_cpus", lambda: 0.1)
        assert hf.fit_threads() == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
