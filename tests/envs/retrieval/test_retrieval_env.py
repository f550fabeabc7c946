import pytest

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.retrieval import build_world, index, world
from agentgym.envs.retrieval.corpus import split_questions
from agentgym.errors import ConfigError


def call(name, **args):
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, args),))


def test_world_is_deterministic_and_multi_hop():
    a, b = build_world(), world()
    assert a.docs == b.docs and a.questions == b.questions
    assert len(a.docs) > 300 and len(a.questions) > 300
    assert all(q.hops >= 2 for q in a.questions)
    train, test = split_questions("train"), split_questions("test")
    assert not {q.id for q in train} & {q.id for q in test} and len(test) > 40
    # one search with the question does not hand over the answer for most questions
    found = sum(q.answer.lower() in " ".join(d.text.lower() for d, _ in index().search(
        q.question)) for q in a.questions)
    assert found < 0.2 * len(a.questions)


async def test_expert_solves_with_search_and_open():
    env = agentgym.make("agentgym/MultiHopSearch-v0", split="test")
    await env.reset(seed=2)
    first = await env.step(env.expert_action())
    assert first.valid and "company/" in first.observation[0].content or \
        "person/" in first.observation[0].content
    while True:
        r = await env.step(env.expert_action())
        if r.done:
            break
    assert r.terminated and r.reward == 1.0


async def test_bad_tool_input():
    env = agentgym.make("agentgym/MultiHopSearch-v0")
    await env.reset(seed=0)
    r = await env.step(call("open", doc_id="city/nowhere-at-all"))
    assert not r.valid and "use an id that search returned" in r.observation[0].content
    r = await env.step(call("search", query="   "))
    assert not r.valid and "empty" in r.observation[0].content
    r = await env.step(call("search"))
    assert not r.valid and "'query' is a required property" in r.observation[0].content
    r = await env.step(call("search", query="the of and"))
    assert r.valid and "no article matches" in r.observation[0].content


def test_bad_split():
    with pytest.raises(ConfigError, match="split must be one of"):
        agentgym.make("agentgym/MultiHopSearch-v0", split="dev")
