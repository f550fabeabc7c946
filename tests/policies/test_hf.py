"""TransformersPolicy: batching, per-row sampling, exact log-probs, weight sync, SmolLM2."""

from __future__ import annotations

import asyncio
import copy
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym import Message  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from agentgym.policies.base import Completion, GenerationRequest, Policy, SamplingParams  # noqa: E402
from agentgym.policies.hf import (  # noqa: E402
    PolicyClosedError,
    TransformersPolicy,
    completion_logprobs,
)
from agentgym.policies.models import embedded_model_dir, tiny_model  # noqa: E402
from agentgym.prompting import render_prompt  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer: Any) -> Any:
    return copy.deepcopy(smollm2_tokenizer)  # the policy sets left padding: keep ours apart


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    return tiny_model(tokenizer=tokenizer, seed=0)


def req(text: str, **params: Any) -> GenerationRequest:
    return GenerationRequest((Message("user", text),), params=SamplingParams(**params))


PROMPTS = ["Hi", "What is 6*7?", "Push the box left, then up, then left again, please.",
           "a b c d e f g h i j k l m n o p", "Sokoban", "?"]


def assert_rescored(model: Any, completions: list[Completion], temps: list[float]) -> None:
    """Recorded log-probs == one plain forward pass over prompt + completion, to 1e-4."""
    import torch

    for c, t in zip(completions, temps, strict=True):
        ids = torch.tensor([c.prompt_ids + c.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].float()  # (P + C, V)
        scores = logits[len(c.prompt_ids) - 1:-1] / (t if t > 0 else 1.0)  # predicts each y_t
        expected = torch.log_softmax(scores, -1)[torch.arange(len(c.completion_ids)),
                                                 torch.tensor(c.completion_ids)]
        assert len(c.logprobs) == len(c.completion_ids) > 0
        assert torch.allclose(torch.tensor(c.logprobs), expected, rtol=0, atol=TOL)
        helper = completion_logprobs(model, c.prompt_ids, c.completion_ids, t)
        assert torch.allclose(torch.tensor(helper), expected, rtol=0, atol=1e-5)


async def test_is_a_policy(model: Any, tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer) as policy:
        assert isinstance(policy, Policy) and policy.tokenizer is tokenizer


async def test_batched_greedy_equals_one_at_a_time(model: Any, tokenizer: Any) -> None:
    requests = [req(p, temperature=0.0, max_tokens=6 + 2 * i) for i, p in enumerate(PROMPTS)]
    async with TransformersPolicy(model, tokenizer) as policy:
        batched = await policy.generate(requests)
        assert policy.stats.batches == 1
        # The chat template's system prompt is a prefix of every prompt: it runs once.
        shared = len(os.path.commonprefix([c.prompt_ids for c in batched]))
        assert shared > 20
        assert policy.stats.prefill_tokens == shared + sum(
            len(c.prompt_ids) - shared for c in batched)
        single = [(await policy.generate([r]))[0] for r in requests]
    assert len({len(r.prompt_ids) for r in batched}) > 1  # left padding really happened
    for b, s in zip(batched, single, strict=True):
        assert b.completion_ids == s.completion_ids and b.prompt_ids == s.prompt_ids
        assert b.finish_reason == s.finish_reason and b.text == s.text
        assert max(abs(x - y) for x, y in zip(b.logprobs, s.logprobs, strict=True)) < TOL
    assert_rescored(model, batched, [0.0] * len(batched))


async def test_a_group_of_identical_prompts_shares_one_prefill(model: Any,
                                                                 tokenizer: Any) -> None:
    group = [req(PROMPTS[2], temperature=1.0, max_tokens=5, seed=s) for s in range(4)]
    group.append(req(PROMPTS[2], temperature=0.0, max_tokens=5))
    async with TransformersPolicy(model, tokenizer) as policy:
        out = await policy.generate(group)
        # One prefill of the prompt for all five rows, then 4 decode steps.
        assert policy.stats.forward_passes == 1 + 4
        assert policy.stats.prefill_tokens == len(out[0].prompt_ids)
        [greedy] = await policy.generate([group[-1]])
        [seeded] = await policy.generate([group[1]])
    async with TransformersPolicy(model, tokenizer, share_prefix=False) as policy:
        unshared = await policy.generate(group)
        assert policy.stats.prefill_tokens == 5 * len(out[0].prompt_ids)
    assert out[-1].completion_ids == greedy.completion_ids == unshared[-1].completion_ids
    assert out[1].completion_ids == seeded.completion_ids == unshared[1].completion_ids
    assert len({c.completion_ids for c in out}) == 5
    assert_rescored(model, out, [r.params.temperature for r in group])


async def test_prompt_is_the_chat_template_without_a_second_bos(model: Any,
                                                                tokenizer: Any) -> None:
    request = req("What is the capital of France?", max_tokens=2)
    async with TransformersPolicy(model, tokenizer) as policy:
        [c] = await policy.generate([request])
        [again] = await policy.generate([GenerationRequest(
            prompt_ids=c.prompt_ids, params=SamplingParams(temperature=0, max_tokens=2))])
    text = render_prompt(tokenizer, request.messages)
    assert c.prompt_ids == tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert c.prompt_ids[0] == tokenizer.bos_token_id != c.prompt_ids[1]
    assert again.prompt_ids == c.prompt_ids


async def test_logprobs_match_rescoring_with_mixed_settings(model: Any, tokenizer: Any) -> None:
    settings = [dict(temperature=0.0), dict(temperature=0.7, top_p=0.9),
                dict(temperature=1.0), dict(temperature=1.5, top_p=0.5),
                dict(temperature=1.0, seed=3), dict(temperature=0.3, seed=4)]
    requests = [req(p, max_tokens=12, **s) for p, s in zip(PROMPTS, settings, strict=True)]
    async with TransformersPolicy(model, tokenizer, seed=0) as policy:
        out = await policy.generate(requests)
    assert_rescored(model, out, [r.params.temperature for r in requests])


async def test_mixed_temperatures_share_a_batch(model: Any, tokenizer: Any) -> None:
    greedy = req(PROMPTS[2], temperature=0.0, max_tokens=16)
    hot = [req(PROMPTS[2], temperature=1.0, max_tokens=16, seed=s) for s in range(3)]
    async with TransformersPolicy(model, tokenizer) as policy:
        [alone] = await policy.generate([greedy])
        mixed = await policy.generate([hot[0], greedy, hot[1], hot[2]])
        assert policy.stats.batches == 2
    assert mixed[1].completion_ids == alone.completion_ids
    sampled = {c.completion_ids for c in (mixed[0], mixed[2], mixed[3])}
    assert len(sampled) == 3 and alone.completion_ids not in sampled


async def test_seed_is_reproducible_in_any_batch(model: Any, tokenizer: Any) -> None:
    seeded = req(PROMPTS[1], temperature=1.0, top_p=0.95, max_tokens=10, seed=7)
    async with TransformersPolicy(model, tokenizer) as policy:
        [alone] = await policy.generate([seeded])
        crowd = await policy.generate([req(p, temperature=1.0, max_tokens=14) for p in PROMPTS]
                                      + [seeded])
        [other_seed] = await policy.generate([req(PROMPTS[1], temperature=1.0, top_p=0.95,
                                                  max_tokens=10, seed=8)])
    assert crowd[-1].completion_ids == alone.completion_ids
    assert other_seed.completion_ids != alone.completion_ids


async def test_tiny_top_p_is_greedy_but_logprobs_stay_tempered(model: Any,
                                                                tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer) as policy:
        greedy, nucleus = await policy.generate([
            req(PROMPTS[3], temperature=0.0, max_tokens=8),
            req(PROMPTS[3], temperature=1.0, top_p=1e-6, max_tokens=8)])
    assert nucleus.completion_ids == greedy.completion_ids
    # T = 1 in both cases, and top_p does not enter the recorded log-prob.
    assert max(abs(a - b) for a, b in zip(nucleus.logprobs, greedy.logprobs, strict=True)) < TOL


async def test_per_request_max_tokens(model: Any, tokenizer: Any) -> None:
    limits = [1, 3, 9, 5]
    async with TransformersPolicy(model, tokenizer) as policy:
        out = await policy.generate([req(PROMPTS[0], temperature=1.0, max_tokens=n, seed=n)
                                     for n in limits])
    assert [len(c.completion_ids) for c in out] == limits
    assert {c.finish_reason for c in out} == {"length"}
    assert all(c.text == tokenizer.decode(c.completion_ids, skip_special_tokens=True)
               for c in out)


async def test_stop_string_ends_the_row_and_stays_in_the_text(model: Any,
                                                                tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer) as policy:
        [full] = await policy.generate([req(PROMPTS[2], temperature=0.0, max_tokens=12)])
        ids = full.completion_ids
        stop = tokenizer.decode([ids[4]]).strip()[:3] or tokenizer.decode([ids[4]])
        end = next(j for j in range(len(ids))
                   if stop in tokenizer.decode(ids[:j + 1], skip_special_tokens=True))
        stopped, untouched = await policy.generate([
            req(PROMPTS[2], temperature=0.0, max_tokens=12, stop=("@@never@@", stop)),
            req(PROMPTS[2], temperature=0.0, max_tokens=12)])
    assert stopped.completion_ids == ids[:end + 1]
    assert stopped.finish_reason == "stop" and stop in stopped.text
    assert untouched.completion_ids == ids and untouched.finish_reason == "length"


async def test_eos_stops_and_is_kept_in_the_ids(model: Any, tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer) as policy:
        [full] = await policy.generate([req(PROMPTS[4], temperature=0.0, max_tokens=10)])
        policy.eos_ids = frozenset({full.completion_ids[2]})  # pretend this token is EOS
        [short] = await policy.generate([req(PROMPTS[4], temperature=0.0, max_tokens=10)])
    first = full.completion_ids.index(full.completion_ids[2])
    assert short.completion_ids == full.completion_ids[:first + 1]
    assert short.finish_reason == "stop"


async def test_concurrent_calls_are_batched(model: Any, tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer, batch_wait_ms=20) as policy:
        calls = [policy.generate([req(PROMPTS[i % len(PROMPTS)], temperature=0.0,
                                      max_tokens=4)]) for i in range(16)]
        results = await asyncio.gather(*calls)
        assert policy.stats.requests == 16
        assert policy.stats.batches < 16 and policy.stats.largest_batch > 1
        [again] = await policy.generate([req(PROMPTS[0], temperature=0.0, max_tokens=4)])
    assert results[0][0].completion_ids == again.completion_ids


async def test_max_batch_size_splits_batches(model: Any, tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer, max_batch_size=4) as policy:
        out = await policy.generate([req(p, max_tokens=2) for p in PROMPTS * 2])
        assert len(out) == 12 and policy.stats.batches == 3
        assert policy.stats.largest_batch == 4


async def test_event_loop_stays_responsive(model: Any, tokenizer: Any) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    async with TransformersPolicy(model, tokenizer) as policy:
        task = asyncio.create_task(ticker())
        await policy.generate([req(p, max_tokens=40) for p in PROMPTS])
        task.cancel()
    assert ticks >= 3


async def test_cancelled_caller_does_not_disturb_others(model: Any, tokenizer: Any) -> None:
    async with TransformersPolicy(model, tokenizer, batch_wait_ms=20) as policy:
        doomed = asyncio.create_task(policy.generate([req(PROMPTS[0], max_tokens=3)]))
        kept = asyncio.create_task(policy.generate([req(PROMPTS[1], max_tokens=3)]))
        await asyncio.sleep(0)
        doomed.cancel()
        [c] = await kept
        assert len(c.completion_ids) == 3 and policy.stats.largest_batch == 1


async def test_bad_requests_are_config_errors(model: Any, tokenizer: Any) -> None:
    with pytest.raises(ConfigError, match="needs messages or prompt_ids"):
        GenerationRequest()
    with pytest.raises(ConfigError, match="max_batch_size"):
        TransformersPolicy(model, tokenizer, max_batch_size=0)
    async with TransformersPolicy(model, tokenizer) as policy:
        assert await policy.generate([]) == []
        with pytest.raises(ConfigError, match=r"pass \[request\]"):
            await policy.generate(req("hi"))  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="prompt_ids must be in"):
            await policy.generate([GenerationRequest(prompt_ids=(1, 10**7))])
        with pytest.raises(ConfigError, match="context is 4096"):
            await policy.generate([GenerationRequest(prompt_ids=(1,) * 5000)])
        assert policy.stats.requests == 0


async def test_aclose_is_idempotent_and_final(model: Any, tokenizer: Any) -> None:
    policy = TransformersPolicy(model, tokenizer)
    await policy.generate([req("hi", max_tokens=1)])
    await policy.aclose()
    await policy.aclose()
    with pytest.raises(PolicyClosedError):
        await policy.generate([req("hi")])
    assert policy.model is model  # a model passed in belongs to the caller


async def test_weight_updates_bump_the_version(tokenizer: Any) -> None:
    import torch

    model = tiny_model(tokenizer=tokenizer, seed=1)
    greedy = req("hi", temperature=0.0, max_tokens=3)
    async with TransformersPolicy(model, tokenizer) as policy:
        [before] = await policy.generate([greedy])
        assert before.policy_version == 0
        zeros = torch.zeros_like(model.lm_head.weight)
        assert policy.load_weights({"lm_head.weight": zeros}) == 1
        [after] = await policy.generate([greedy])
        # Every logit is 0 now: argmax takes id 0 and each log-prob is -log(V).
        assert after.policy_version == 1 and after.completion_ids == (0, 0, 0)
        assert after.logprobs == pytest.approx([-math.log(len(tokenizer))] * 3, abs=TOL)
        fresh = tiny_model(tokenizer=tokenizer, seed=1).state_dict()
        assert policy.load_state_dict(fresh, version=10) == 10
        [back] = await policy.generate([greedy])
        assert back.policy_version == 10 and back.completion_ids == before.completion_ids
        with pytest.raises(ConfigError, match="did you mean 'lm_head.weight'"):
            policy.load_weights([("lm_head.weigth", zeros)])
        with pytest.raises(ConfigError, match="expected shape"):
            policy.load_weights([("lm_head.weight", zeros[:3])])
        assert policy.policy_version == 10


# --- the real embedded model -------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same cache root as test_models.py: SmolLM2 is converted once per test run."""
    root = tmp_path_factory.getbasetemp() / "agentgym-cache"
    embedded_model_dir(root)
    return root


@pytest.fixture(scope="module")
def smollm2(smollm2_cache: Path) -> Iterator[TransformersPolicy]:
    policy = TransformersPolicy.load("smollm2", cache_dir=smollm2_cache, seed=0)
    yield policy
    asyncio.run(policy.aclose())


@pytest.mark.slow
async def test_smollm2_knows_the_capital_of_france(smollm2: TransformersPolicy) -> None:
    [c] = await smollm2.generate([req("What is the capital of France?", temperature=0.0,
                                      max_tokens=32)])
    assert "Paris" in c.text and c.finish_reason == "stop"
    assert c.completion_ids[-1] == smollm2.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert "<|im_end|>" not in c.text
    assert c.prompt_ids[:2] == (1, 9690)  # one <|im_start|>, then "system"


@pytest.mark.slow
async def test_smollm2_logprobs_match_rescoring(smollm2: TransformersPolicy) -> None:
    settings = [dict(temperature=0.0), dict(temperature=0.7, top_p=0.9, seed=1),
                dict(temperature=1.0, seed=2)]
    prompts = ["Name three colors.", "Write a haiku about boxes.", "Count to five."]
    out = await smollm2.generate([req(p, max_tokens=20, **s)
                                  for p, s in zip(prompts, settings, strict=True)])
    assert_rescored(smollm2.model, out, [s.get("temperature", 1.0) for s in settings])
    [alone] = await smollm2.generate([req(prompts[0], temperature=0.0, max_tokens=20)])
    assert alone.completion_ids == out[0].completion_ids


def test_rollout_device_and_dtype_reach_the_model(tiny_model_dir):
    """``agentgym rollout --device/--dtype`` (the study's rollouts on a GPU machine use
    them) build the in-process model with that dtype; a bad dtype names the choices."""
    import torch

    from agentgym.policies import make_agent

    agent = make_agent(f"hf:{tiny_model_dir}", device="cpu", dtype="bfloat16")
    assert next(agent.policy.model.parameters()).dtype == torch.bfloat16
    assert next(make_agent(f"hf:{tiny_model_dir}").policy.model.parameters()).dtype \
        == torch.float32
    with pytest.raises(ConfigError, match="float32"):
        make_agent(f"hf:{tiny_model_dir}", dtype="fp8")
