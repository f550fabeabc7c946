"""FunctionCalls-v0 with synthesized functions: gold replies, splits by subject, no BFCL name."""

import json
import string

import numpy as np
import pytest

import agentgym
from agentgym.envs.bfcl import scoring
from agentgym.envs.function_calls import KINDS, FunctionCallsEnv, make_task, synth
from agentgym.envs.function_calls.env import fan_calls, one_call
from agentgym.envs.function_calls.library import FUNCTIONS
from agentgym.envs.function_calls.spec import fields
from agentgym.errors import ConfigError


@pytest.mark.parametrize("functions", ["synthesized", "both"])
@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("kind", KINDS)
async def test_gold_replies_score_full_marks(kind, split, functions):
    env = FunctionCallsEnv(kind, split, functions)
    for seed in range(80):
        await env.reset(seed=seed)
        result = await env.step(env.expert_action())
        assert result.reward == 1.0, (seed, env.task.entry, result.info["bfcl"])


async def test_a_wrong_argument_scores_zero():
    env = FunctionCallsEnv("simple", "test", "synthesized")
    for seed in range(40):
        await env.reset(seed=seed)
        (call,) = env.expert_action().tool_calls
        name, value = next(iter(call.arguments.items()))
        wrong = (value + 1 if isinstance(value, int | float) and not isinstance(value, bool)
                 else not value if isinstance(value, bool) else [] if isinstance(value, list)
                 else "Nowhere")
        reply = agentgym.Message("assistant", "", tool_calls=(agentgym.ToolCall(
            "c0", call.name, {**call.arguments, name: wrong}),))
        assert (await env.step(reply)).reward == 0.0, (seed, call, wrong)


def test_splits_share_no_subject_and_no_function_name():
    train, test = synth.pool("train"), synth.pool("test")
    assert len(train) > 1000 and len(test) > 500
    assert not {f.topic for f in train} & {f.topic for f in test}
    assert not {f.name for f in train} & {f.name for f in test}
    for seed in range(200):  # a test task offers test-split functions only
        names = {d["name"] for d in make_task("test", seed, "mixed", "synthesized")
                 .entry["function"]}
        assert names <= {f.name for f in test}, names


def test_both_draws_each_source_about_half_the_time():
    curated = {f.name for f in FUNCTIONS}
    sources = [bool({d["name"] for d in make_task("train", s, "simple", "both")
                     .entry["function"]} & curated) for s in range(400)]
    assert 0.4 < sum(sources) / len(sources) < 0.6


def test_pool_is_well_formed_and_every_fanout_draws_four_calls():
    types = {"integer", "float", "string", "boolean", "array", "dict"}
    for fn in synth.pool("train")[:400] + synth.pool("test")[:200]:
        names = {p.name for p in fn.params}
        required = {p.name for p in fn.params if p.required}
        assert len(names) == len(fn.params) and all(p.type in types for p in fn.params)
        for template in fn.templates:
            assert set(fields(template)) <= names and required <= set(fields(template))
            assert template[0] not in string.punctuation + "{", template
        rng = np.random.default_rng(0)
        call = one_call(fn, rng)
        assert set(call.answer) == names
        if fn.fanout:
            _, calls = fan_calls(fn, rng, 4)
            assert len({c.key() for c in calls}) == 4
        json.dumps(fn.doc())


def test_no_name_is_bfcls():
    taken = synth.bfcl_names()
    assert len(taken) > 1000  # the comparison saw BFCL's data
    for fn in synth.pool("train") + synth.pool("test"):
        assert fn.name.lower() not in taken
        assert scoring.served_name(fn.name).lower() not in taken


def test_curated_stays_the_default_and_bad_sources_are_refused():
    assert make_task("train", 5) == make_task("train", 5, "mixed", "curated")
    assert make_task("train", 5, "mixed", "synthesized").entry["id"].startswith("synthesized-")
    with pytest.raises(ConfigError, match="did you mean 'synthesized'"):
        agentgym.make("agentgym/FunctionCalls-v0", functions="synthesised")
