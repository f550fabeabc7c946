"""FunctionCalls-v0 with ``requests="varied"``: longer requests, the same kind of ground truth."""

import json

import numpy as np
import pytest

import agentgym
from agentgym.envs.function_calls import KINDS, FunctionCallsEnv, make_task
from agentgym.envs.function_calls.env import one_call
from agentgym.envs.function_calls.library import FUNCTIONS
from agentgym.errors import ConfigError


@pytest.mark.parametrize("functions", ["curated", "synthesized"])
@pytest.mark.parametrize("kind", KINDS)
async def test_gold_replies_score_full_marks(kind, functions):
    env = FunctionCallsEnv(kind, "train", functions, requests="varied")
    for seed in range(100):
        await env.reset(seed=seed)
        result = await env.step(env.expert_action())
        assert result.terminated and result.reward == 1.0, (seed, result.info["bfcl"])
        if kind != "irrelevance":
            calls = [json.dumps(c, sort_keys=True) for c in env.task.ground_truth]
            assert len(set(calls)) == len(calls), (seed, env.task.entry["question"])


def test_every_optional_argument_the_answer_requires_is_in_the_request():
    """An optional argument the call must give is one the request states, and varied
    requests state ones their templates leave out."""
    rng = np.random.default_rng(0)
    stated = 0
    for fn in FUNCTIONS:
        for _ in range(20):
            call = one_call(fn, rng, varied=True)
            for p in fn.params:
                if p.required or "" in call.answer[p.name]:
                    continue
                assert p.text(call.answer[p.name][0]) in call.request, (fn.name, call.request)
                words = p.name.replace("_", " ")
                stated += any(clause in call.request for clause in (
                    f"as the {words}.", f"Set the {words} to ", f"with {words} ",
                    f"and {words} "))
    assert stated > 50


def test_varied_requests_combine_greetings_enumerations_and_fanouts():
    texts = [make_task("train", s, "parallel_multiple", requests="varied").entry["question"][0]
             [0]["content"] for s in range(200)]
    assert sum(t.startswith(("Can you help", "I need several", "Could you do the following",
                             "I have a few requests")) for t in texts) > 40
    assert any("\n\nSecond, " in t for t in texts)
    singles = [make_task("train", s, "simple", requests="varied").entry["question"][0][0]
               ["content"] for s in range(200)]
    assert sum(t.startswith(("Hi! ", "Quick question: ", "Hello, ")) for t in singles) > 10
    # a repeated function asked for in one sentence: fewer enumerated parts than calls
    tasks = [make_task("train", s, "parallel_multiple", requests="varied") for s in range(200)]
    fanned = 0
    for t in tasks:
        text = t.entry["question"][0][0]["content"]
        if "First, " in text:
            parts = sum(f"{w}, " in text for w in ("First", "Second", "Third", "Fourth", "Finally"))
            fanned += parts < len(t.ground_truth)
    assert fanned > 5


def test_plain_stays_the_default_and_bad_styles_are_refused():
    assert make_task("train", 3, "parallel") == make_task("train", 3, "parallel",
                                                          requests="plain")
    assert make_task("train", 3, "parallel", requests="varied").entry["id"].startswith("varied-")
    with pytest.raises(ConfigError, match="did you mean 'varied'"):
        agentgym.make("agentgym/FunctionCalls-v0", requests="varid")
