"""FunctionCalls-v0: generated tasks, BFCL's checker as the reward, splits, the library."""

import json
import string

import numpy as np
import pytest

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.bfcl import BFCLSingleTurnEnv, scoring
from agentgym.envs.bfcl.calls import question_messages
from agentgym.envs.function_calls import KINDS, FunctionCallsEnv, make_task
from agentgym.envs.function_calls.env import BFCL_COUNTS, KIND_OF, fan_calls, in_split, one_call
from agentgym.envs.function_calls.library import FUNCTIONS, OFF_TOPIC
from agentgym.envs.function_calls.spec import fields
from agentgym.errors import ConfigError
from agentgym.policies.simple import ScriptedAgent
from agentgym.rollout import RolloutConfig, run_groups

ENV = "agentgym/FunctionCalls-v0"
AST_KINDS = [k for k in KINDS if k != "irrelevance"]


def reply(*calls):
    return Message("assistant", "", tool_calls=tuple(
        ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(calls)))


def gold(env):
    return [(c.name, dict(c.arguments)) for c in env.expert_action().tool_calls]


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("kind", KINDS)
async def test_gold_replies_score_full_marks(kind, split):
    env = FunctionCallsEnv(kind, split)
    for seed in range(200):
        await env.reset(seed=seed)
        result = await env.step(env.expert_action())
        assert result.terminated and result.reward == 1.0, (seed, result.info["bfcl"])
        assert result.info["valid"] and result.info["kind"] == kind


async def test_the_expert_writes_a_whole_float_as_the_request_does_and_both_forms_score():
    """A float parameter drawn as 244.0 is "244" in the request: the gold call says 244."""
    env = FunctionCallsEnv("simple", "train")
    seen = 0
    for seed in range(200):
        await env.reset(seed=seed)
        (name, args), = gold(env)
        fn = next(f for f in FUNCTIONS if f.name.replace(".", "_") == name)
        whole = {k: v for k, v in args.items()
                 if fn.param(k).type == "float" and isinstance(v, int | float)
                 and float(v).is_integer()}
        if not whole:
            continue
        seen += 1
        assert all(type(v) is int for v in whole.values()), (seed, args)
        question = env.task.entry["question"][0][-1]["content"]
        assert all(str(v) in question for v in whole.values()), (seed, question)
        as_floats = {**args, **{k: float(v) for k, v in whole.items()}}
        assert (await env.step(reply((name, as_floats)))).reward == 1.0
    assert seen > 20


@pytest.mark.parametrize("kind", ["parallel", "parallel_multiple"])
async def test_no_task_asks_for_the_same_call_twice(kind):
    env = FunctionCallsEnv(kind, "train")
    for seed in range(300):
        await env.reset(seed=seed)
        calls = [json.dumps(c, sort_keys=True) for c in gold(env)]
        assert len(set(calls)) == len(calls), (seed, env.task.entry["question"])


def perturbed(value):
    """A value of the same JSON type that no answer accepts."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + (7 if isinstance(value, int) else 7.25)
    if isinstance(value, str):
        return value + " Extra"
    if isinstance(value, list):
        return [*value, value[0]]
    return {k: perturbed(v) for k, v in value.items()}


@pytest.mark.parametrize("kind", AST_KINDS)
async def test_each_kind_of_mistake_scores_zero(kind):
    env = FunctionCallsEnv(kind, "train")
    for seed in range(40):
        await env.reset(seed=seed)
        calls = gold(env)
        offered = [t.name for t in env.tools]
        (name, args), rest = calls[0], calls[1:]
        wrong_name = [n for n in offered if n != name]
        mistakes = {
            "wrong value": [(name, {**args, k: perturbed(v)}) for k, v in list(args.items())[:1]],
            "missing required": [(name, dict(list(args.items())[1:]))],
            "extra call": [(name, {**args, k: perturbed(v)}) for k, v in list(args.items())[:1]],
            "unknown function": [(name + "_v2", args)],
        }
        mistakes = {what: c + rest for what, c in mistakes.items()}
        mistakes["extra call"] = calls + mistakes["extra call"]
        if wrong_name:  # another offered function with the same arguments
            mistakes["wrong function"] = [(wrong_name[0], args), *rest]
        for what, bad in mistakes.items():
            await env.reset(seed=seed)
            result = await env.step(reply(*bad))
            assert result.reward == 0.0, (what, seed, bad, env.task.ground_truth)
        await env.reset(seed=seed)  # the gold calls in another order are still right
        assert (await env.step(reply(*reversed(calls)))).reward == 1.0


async def test_irrelevance_any_call_scores_zero_and_prose_scores_one():
    env = FunctionCallsEnv("irrelevance", "test")
    for seed in range(40):
        await env.reset(seed=seed)
        prose = await env.step(Message("assistant", "I can't help with that using these tools."))
        assert prose.reward == 1.0 and prose.info["valid"]
        await env.reset(seed=seed)
        tool = env.tools[0]
        # well-typed values for every parameter: a call is wrong whatever it says
        args = {p: {"integer": 1, "number": 1.5, "boolean": True, "array": [],
                    "object": {}}.get(s.get("type"), "x")
                for p, s in tool.parameters["properties"].items()}
        call = await env.step(reply((tool.name, args)))
        assert call.reward == 0.0 and call.info["valid"]


async def test_malformed_markup_is_invalid_and_scores_zero():
    env = agentgym.make(ENV, kind="simple")
    await env.reset(seed=1)
    result = await env.step(Message("assistant", '<tool_call>{"name": oops</tool_call>'))
    assert result.reward == 0.0 and result.info["valid"] is False


def test_splits_are_disjoint_and_tasks_repeat_by_seed():
    texts = {}
    for split in ("train", "test"):
        texts[split] = set()
        for seed in range(500):
            task = make_task(split, seed)
            text = task.entry["question"][0][0]["content"]
            assert in_split(text, split)
            texts[split].add(text)
    assert not texts["train"] & texts["test"]
    assert len(texts["test"]) > 400  # the hash partition leaves plenty of variety
    assert make_task("test", 3, "parallel") == make_task("test", 3, "parallel")


def test_mixed_draws_kinds_in_bfcls_proportions():
    counts = dict.fromkeys(KINDS, 0)
    for seed in range(1000):
        counts[KIND_OF[make_task("train", seed).category.name]] += 1
    total = sum(BFCL_COUNTS.values())
    for kind in KINDS:  # 1000 draws: within 5 points of BFCL's share
        assert abs(counts[kind] / 1000 - BFCL_COUNTS[kind] / total) < 0.05, counts


async def test_prompt_and_tools_are_bfcl_single_turns_own():
    """The env is BFCL's single-turn env with generated entries: same reset and step code,
    tools made by BFCL's converter, the request as BFCL's FC mode sends it."""
    assert issubclass(FunctionCallsEnv, BFCLSingleTurnEnv)
    for method in ("_reset", "_step", "expert_action", "state_key"):
        assert getattr(FunctionCallsEnv, method) is getattr(BFCLSingleTurnEnv, method)
    env = agentgym.make(ENV, kind="multiple")
    messages, info = await env.reset(seed=5)
    assert env.tools == scoring.tool_specs(env.unwrapped.task.entry["function"])
    assert messages == question_messages(env.unwrapped.task.entry["question"][0])
    assert all("." not in t.name for t in env.tools)  # served as BFCL's FC form serves them
    # the docs carry the hint BFCL's loader adds to its own entries' descriptions
    real = agentgym.make("bfcl/SingleTurn-v0", category="multiple")
    await real.reset(seed=0)
    hint = python_hint()
    assert hint and all(t.description.endswith(hint) for t in [*env.tools, *real.tools])
    assert info["category"] == "multiple" and info["bfcl_version"]


async def test_scripted_policy_through_the_rollout_engine():
    trajs = await run_groups(lambda: agentgym.make(ENV, split="test"), ScriptedAgent(),
                             range(8), RolloutConfig(), env_id=ENV)
    assert [t.outcome_reward for t in trajs] == [1.0] * 8
    assert all(len(t.steps) == 1 for t in trajs)


async def test_contract_checker():
    probe = agentgym.make(ENV)
    await probe.reset(seed=0)
    ran = await agentgym.check_env(agentgym.make(ENV), actions=[probe.expert_action()])
    assert "determinism" in ran


def test_bad_kind_or_split():
    with pytest.raises(ConfigError, match="did you mean 'simple'"):
        agentgym.make(ENV, kind="simpel")
    with pytest.raises(ConfigError, match="split must be one of"):
        agentgym.make(ENV, split="all")


def test_library_is_well_formed():
    types = {"integer", "float", "string", "boolean", "array", "dict"}
    assert 40 <= len(FUNCTIONS) and len({f.name for f in FUNCTIONS}) == len(FUNCTIONS)
    for fn in FUNCTIONS:
        names = {p.name for p in fn.params}
        required = {p.name for p in fn.params if p.required}
        assert all(p.type in types for p in fn.params), fn.name
        for template in fn.templates:
            assert set(fields(template)) <= names and required <= set(fields(template))
            assert template[0] not in string.punctuation + "{", template
        for template in fn.fanout:
            stars = [f for f in fields(template) if f.endswith("*")]
            assert len(stars) == 1 and stars[0][:-1] in required, template
            assert {f.rstrip("*") for f in fields(template)} <= names
        json.dumps(fn.doc())


def test_every_function_and_fanout_can_be_drawn():
    """Each function yields calls, and each fanout four distinct ones (the most a task asks)."""
    for fn in FUNCTIONS:
        rng = np.random.default_rng(0)
        for _ in range(20):
            call = one_call(fn, rng)
            assert call.request and set(call.answer) == {p.name for p in fn.params}
        for _ in range(10 * len(fn.fanout)):
            text, calls = fan_calls(fn, rng, 4)
            assert len({c.key() for c in calls}) == 4, text


def python_hint():
    """The sentence BFCL's loader appends to every Python function description."""
    from agentgym.envs.bfcl.data import bfcl_modules

    (entry,) = bfcl_modules().add_language_specific_hint_to_function_doc([{
        "id": "simple_python_0",
        "function": [{"name": "f", "description": "", "parameters": {"properties": {}}}]}])
    return entry["function"][0]["description"]


def test_nothing_is_bfcls():
    """No function name (as written or as served) or description of the library, and no
    generated request, equals one of BFCL's single-turn entries."""
    from agentgym.envs.bfcl.data import SINGLE_TURN, get_task, task_ids

    names, descriptions, questions = set(), set(), set()
    hint = python_hint()
    for category in SINGLE_TURN:
        for task_id in task_ids(category):
            entry = get_task(category, task_id=task_id).entry
            for doc in entry["function"]:
                names |= {doc["name"].lower(), scoring.served_name(doc["name"]).lower()}
                descriptions.add(doc["description"].removesuffix(hint).strip().lower())
            questions |= {str(m.get("content", "")).strip().lower()
                          for turn in entry["question"] for m in turn}
    assert len(names) > 1000 and len(questions) > 1000  # the comparison saw BFCL's data
    for fn in FUNCTIONS:
        assert fn.name.lower() not in names and scoring.served_name(fn.name).lower() not in names
        assert fn.description.strip().lower() not in descriptions, fn.name
    mine = {t.format(x=x).lower() for t, pool in OFF_TOPIC for x in pool}
    for seed in range(300):
        mine.add(make_task("train", seed).entry["question"][0][0]["content"].lower())
    assert not mine & questions
