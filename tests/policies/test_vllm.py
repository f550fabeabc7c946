"""The vLLM backend on a real engine (vLLM's CPU build in CI; the CUDA build runs the same
code), with the embedded SmolLM2, against the transformers backend on the same weights.

One engine is shared by the module (a start costs 30-60 s on two cores); tests that change
its weights put the original ones back.
"""

import asyncio
import os
import time

import numpy as np
import pytest
import pytest_asyncio

# One event loop for the module: the engine's output handler lives on the loop that first
# used it, as in a training run (one asyncio.run).
pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]

MARGIN = 2e-3
"""A greedy divergence is explained when the transformers model's two best next tokens are
closer than this in log-prob there (kernel and summation order decide such near-ties)."""
LOGPROB_TOL = 2e-3
"""Largest |engine log-prob − trainer log-prob| allowed per token (float32 weights)."""
PRELOAD = os.environ.get("LD_PRELOAD")
"""This process's LD_PRELOAD before any engine started (vLLM adds to it while one starts)."""


def _prompts(n=32):
    from agentgym import Message

    asks = ["What is {a} * {b}?", "Name a color that starts with the letter {c}.",
            "Write one sentence about the number {a}.", "Translate 'good morning' to French.",
            "List {a} fruits.", "What comes after {b} in counting?",
            "Give a one-word synonym for happy.", "Say hello in {a} words."]
    return [(Message("user", asks[i % len(asks)].format(a=2 + i % 7, b=3 + i % 5,
                                                         c="ABCDEFGH"[i % 8])),)
            for i in range(n)]


def _requests(messages, **params):
    from agentgym.policies.base import GenerationRequest, SamplingParams

    return [GenerationRequest(m, params=SamplingParams(**params)) for m in messages]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from agentgym.policies.models import embedded_model_dir

    return str(embedded_model_dir())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(model_dir):
    pytest.importorskip("vllm")
    from agentgym.policies.vllm import VLLMPolicy

    policy = VLLMPolicy(model_dir, max_model_len=2048)
    yield policy
    await policy.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reference(model_dir):
    from agentgym.policies.hf import TransformersPolicy

    policy = TransformersPolicy.load(model_dir, prefix_cache_mb=0)
    yield policy
    await policy.aclose()


def _score(model, completions):
    """The trainer's log-probs of each completion's tokens (one forward pass each)."""
    import torch

    out = []
    for c in completions:
        ids = torch.tensor([c.prompt_ids + c.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(c.prompt_ids) - 1: -1].float()
        logp = torch.log_softmax(logits, -1)
        out.append((logp.gather(-1, ids[0, len(c.prompt_ids):, None])[:, 0].numpy(), logp))
    return out


def _explained(model, ours, theirs):
    """Whether a greedy divergence sits on a near-tie of the reference model."""
    first = next(i for i, (a, b) in enumerate(zip(ours.completion_ids + (-1,),
                                                  theirs.completion_ids + (-2,), strict=False))
                 if a != b)
    [(_, logp)] = _score(model, [theirs])
    top = logp[first].topk(2).values
    return float(top[0] - top[1]) < MARGIN


async def _until_running(engine, count=1, bound=120.0):
    """Poll (the engine offers no event for this) until ``count`` requests are unfinished."""
    deadline = time.monotonic() + bound
    while (engine.engine.output_processor.get_num_unfinished_requests() == 0) == bool(count):
        assert time.monotonic() < deadline, f"no {count} running request(s) after {bound} s"
        await asyncio.sleep(0.05)


async def _parity(engine, reference, messages):
    reqs = _requests(messages, temperature=0, max_tokens=24)
    ours, theirs = await engine.generate(reqs), await reference.generate(reqs)
    unexplained = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
                   if a.completion_ids != b.completion_ids
                   and not _explained(reference.model, a, b)]
    same = sum(a.completion_ids == b.completion_ids for a, b in zip(ours, theirs, strict=True))
    return same, unexplained, ours, theirs


async def test_the_engine_runs_under_tcmalloc_and_leaves_ld_preload_as_it_was(engine):
    import psutil

    from agentgym.memory import find_tcmalloc

    cores = [p for p in psutil.Process().children(recursive=True)
             if "EngineCor" in p.name()]
    assert cores, "the engine's process is not a child of this one"
    mapped = {m.path for m in cores[0].memory_maps()}
    assert any("libtcmalloc" in path for path in mapped) == (
        find_tcmalloc() is not None or "libtcmalloc" in (PRELOAD or ""))
    assert os.environ.get("LD_PRELOAD") == PRELOAD


async def test_greedy_generations_equal_the_transformers_backend(engine, reference):
    same, unexplained, ours, theirs = await _parity(engine, reference, _prompts())
    assert unexplained == [], f"{same}/32 equal; unexplained divergences at {unexplained}"
    for a, b in zip(ours, theirs, strict=True):
        assert a.prompt_ids == b.prompt_ids  # the same chat template, the same tokens
        if a.completion_ids == b.completion_ids:
            assert a.text == b.text and a.finish_reason == b.finish_reason


async def test_behaviour_logprobs_agree_with_the_trainers_recompute(engine, reference):
    reqs = _requests(_prompts(16), temperature=1.0, max_tokens=32, seed=7)
    completions = await engine.generate(reqs)
    diffs = np.concatenate([np.abs(np.asarray(c.logprobs) - want) for c, (want, _) in
                            zip(completions, _score(reference.model, completions), strict=True)])
    print(f"|engine - trainer| over {diffs.size} tokens: mean {diffs.mean():.2e}, "
          f"p99 {np.quantile(diffs, 0.99):.2e}, max {diffs.max():.2e}")
    assert diffs.size > 100 and diffs.max() < LOGPROB_TOL


async def test_stop_strings_max_tokens_and_seeds_behave_as_transformers(engine, reference):
    messages = _prompts(8)
    for params in ({"temperature": 0, "max_tokens": 40, "stop": (".", "\n")},
                   {"temperature": 0, "max_tokens": 3}):
        reqs = _requests(messages, **params)
        ours, theirs = await engine.generate(reqs), await reference.generate(reqs)
        for a, b in zip(ours, theirs, strict=True):
            if a.completion_ids != b.completion_ids:
                assert _explained(reference.model, a, b)
                continue
            assert (a.text, a.finish_reason) == (b.text, b.finish_reason)
    short = await engine.generate(_requests(messages, temperature=0, max_tokens=3))
    assert all(len(c.completion_ids) <= 3 for c in short)
    assert any(c.finish_reason == "length" for c in short)
    stopped = await engine.generate(_requests(messages, temperature=0, max_tokens=40,
                                              stop=(".",)))
    assert all(c.finish_reason == "stop" for c in stopped if "." in c.text)
    seeded = _requests(messages[:4], temperature=1.0, max_tokens=16, seed=3)
    first, again = await engine.generate(seeded), await engine.generate(seeded)
    assert [c.completion_ids for c in first] == [c.completion_ids for c in again]


async def test_a_full_batch_of_seeded_requests(engine):
    """64 seeded requests at once (a training step's shape): on a CPU, a split prefill of a
    seeded request killed vLLM 0.32's engine (RuntimeError: CPU Generator does not use
    offset) until chunked prefill was turned off there."""
    reqs = _requests(_prompts(64), temperature=1.0, max_tokens=8, seed=11)
    completions = await engine.generate(reqs)
    assert len(completions) == 64 and all(c.completion_ids for c in completions)


async def test_constrained_tool_calls_follow_the_schema_where_free_ones_did_not(engine):
    """Two shown calls, then requests that invite a float where the schema says integer, or
    keys it lacks: greedy free replies break the schema; under the grammar every call is
    valid (SamplingParams.constrain_tool_calls)."""
    import jsonschema

    from agentgym import Message
    from agentgym.parsing import parse_tool_calls
    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.types import ToolCall, ToolSpec

    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "days": {"type": "integer"}},
              "required": ["city", "days"], "additionalProperties": False}
    tools = (ToolSpec("get_weather", "Current weather in a city.", schema),)
    shots: list = []
    for city, days in (("Paris", 2), ("Lima", 5)):
        shots += [Message("user", f"What's the weather in {city} for {days} days?"),
                  Message("assistant", "", tool_calls=(
                      ToolCall("c", "get_weather", {"city": city, "days": days}),)),
                  Message("user", "Thanks."), Message("assistant", "You're welcome.")]
    asks = ("Weather in Oslo for 2.5 days?", "How warm is it in Cairo over 1.5 days?")

    def calls(constrain):
        return [GenerationRequest((*shots, Message("user", ask)), tools, params=SamplingParams(
            temperature=0, max_tokens=60, constrain_tool_calls=constrain)) for ask in asks]

    def valid(text):
        parsed = parse_tool_calls(text).calls
        try:
            for call in parsed:
                jsonschema.validate(dict(call.arguments), schema)
        except jsonschema.ValidationError:
            return False
        return bool(parsed) and all(c.name == "get_weather" for c in parsed)

    free = await engine.generate(calls(False))
    constrained = await engine.generate(calls(True))
    assert not all(valid(c.text) for c in free), [c.text for c in free]
    assert all(valid(c.text) for c in constrained), [c.text for c in constrained]


async def test_a_cancelled_request_is_aborted_in_the_engine(engine):
    from agentgym import Message

    long = _requests([(Message("user", "Count from 1 to 2000, one number per line."),)],
                     temperature=1.0, max_tokens=1500, seed=0)
    task = asyncio.ensure_future(engine.generate(long))
    await _until_running(engine)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until_running(engine, 0)
    [after] = await engine.generate(_requests(_prompts(1), temperature=0, max_tokens=4))
    assert after.completion_ids


async def test_a_full_weight_sync_gives_the_trainers_weights(engine, reference):
    import torch

    messages = _prompts()
    before = await engine.generate(_requests(messages[:1], temperature=0, max_tokens=16))
    original = {n: p.detach().clone() for n, p in reference.model.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    noisy = {n: p + 0.02 * torch.randn(p.shape, generator=gen) for n, p in original.items()}
    version = engine.policy_version
    try:
        reference.load_state_dict(noisy, strict=False)
        assert await engine.update_weights(noisy) == version + 1
        same, unexplained, ours, _ = await _parity(engine, reference, messages)
        assert unexplained == [], f"{same}/32 equal; unexplained divergences at {unexplained}"
        assert all(c.policy_version == version + 1 for c in ours)
        # The prompt seen before the sync: its cached KV came from the old weights.
        [again] = await engine.generate(_requests(messages[:1], temperature=0, max_tokens=16))
        [(want, _)] = _score(reference.model, [again])
        assert np.abs(np.asarray(again.logprobs) - want).max() < LOGPROB_TOL
        assert again.logprobs != before[0].logprobs
    finally:
        reference.load_state_dict(original, strict=False)
        await engine.update_weights(original)


async def test_running_requests_finish_on_the_weights_they_started_with(engine, reference):
    import torch

    from agentgym import Message

    original = {n: p.detach().clone() for n, p in reference.model.named_parameters()}
    version = engine.policy_version
    long = _requests([(Message("user", "Tell a long story about a cat."),)],
                     temperature=1.0, max_tokens=200, seed=1)
    task = asyncio.ensure_future(engine.generate(long))
    await _until_running(engine)
    zeros = {n: torch.zeros_like(p) if "norm" in n else p for n, p in original.items()}
    try:
        await engine.update_weights(zeros)
        [started_before] = await task
        [started_after] = await engine.generate(_requests(_prompts(1), temperature=0,
                                                          max_tokens=4))
    finally:
        await engine.update_weights(original)
    assert started_before.policy_version == version
    [(want, _)] = _score(reference.model, [started_before])  # scored by the old weights
    assert np.abs(np.asarray(started_before.logprobs) - want).max() < LOGPROB_TOL
    assert started_after.policy_version == version + 1


@pytest.mark.parametrize("top_layers", [0, 8])
async def test_lora_adapter_syncs_match_the_peft_model(model_dir, top_layers):
    """Adapters on every layer, or on the top 8 only (``model.lora.top_layers``: the adapter
    config names the layers, and the engine adapts just those)."""
    pytest.importorskip("vllm")
    import torch

    from agentgym.policies.hf import TransformersPolicy
    from agentgym.policies.models import load_model
    from agentgym.policies.vllm import VLLMPolicy
    from agentgym.trainers.checkpoint import trainable_state
    from agentgym.trainers.config import LoraConfig
    from agentgym.trainers.lora import peft_config, with_lora

    lora = LoraConfig(enabled=True, r=8, alpha=16, top_layers=top_layers)
    model, tokenizer = load_model(model_dir)
    layers = model.config.num_hidden_layers
    model = with_lora(model, lora)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # B = 0 at the start: give the adapters something to say
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    engine = VLLMPolicy(model_dir, max_model_len=1024, lora=peft_config(lora, layers).to_dict())
    reference = TransformersPolicy(model, tokenizer, prefix_cache_mb=0)
    try:
        base = await engine.generate(_requests(_prompts(4), temperature=0, max_tokens=16))
        adapters = trainable_state(model)
        assert adapters and all("lora_" in n for n in adapters)
        assert await engine.update_weights(adapters) == 1
        same, unexplained, ours, _ = await _parity(engine, reference, _prompts(8))
        assert unexplained == [], f"{same}/8 equal; unexplained divergences at {unexplained}"
        assert [c.completion_ids for c in ours[:4]] != [c.completion_ids for c in base]
        with torch.no_grad():  # a second sync replaces the first adapters
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.mul_(-1)
        await engine.update_weights(trainable_state(model), version=5)
        same, unexplained, ours, _ = await _parity(engine, reference, _prompts(8))
        assert unexplained == [] and all(c.policy_version == 5 for c in ours)
    finally:
        await engine.aclose()
        await reference.aclose()


async def test_a_bf16_engine_loads_a_sync_as_it_loads_float32_weights(model_dir, reference,
                                                                    tmp_path):
    """A full sync to a bf16 engine writes bf16 tensors (half the file); the engine ends with
    the weights a float32 file would have given it, token for token and log-prob for log-prob."""
    pytest.importorskip("vllm")
    import torch
    from safetensors.torch import save_file

    from agentgym.policies.vllm import VLLMPolicy

    gen = torch.Generator().manual_seed(1)
    noisy = {n: p.detach() + 0.02 * torch.randn(p.shape, generator=gen)
             for n, p in reference.model.named_parameters()}
    engine = VLLMPolicy(model_dir, dtype="bfloat16", max_model_len=1024)
    reqs = _requests(_prompts(8), temperature=0, max_tokens=16)

    async def one_at_a_time():
        # bf16 kernels on AMX give log-probs that move by ~0.1 with how the engine batches the
        # same prompts (seen on the same weights); alone, each request runs the same shapes
        return [(await engine.generate([r]))[0] for r in reqs]

    try:
        base = await one_at_a_time()
        await engine.update_weights(noisy)
        synced = await one_at_a_time()
        path = tmp_path / "float32.safetensors"  # what a sync wrote before bf16 files
        save_file({n: t.contiguous() for n, t in noisy.items()}, str(path))
        await engine.engine.pause_generation(mode="wait", clear_cache=True)
        await engine.engine.collective_rpc("agentgym_load_weights", args=(str(path),))
        await engine.engine.reset_prefix_cache()
        await engine.engine.resume_generation()
        loaded = await one_at_a_time()
    finally:
        await engine.aclose()
    assert [c.completion_ids for c in synced] != [c.completion_ids for c in base]
    assert [c.completion_ids for c in synced] == [c.completion_ids for c in loaded]
    assert [c.logprobs for c in synced] == [c.logprobs for c in loaded]
