import numpy as np
import pytest

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.code.tasks import TEMPLATES, _run
from agentgym.errors import ConfigError


def call(name, **args):
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, args),))


def test_every_template_program_gives_the_answer():
    for i, template in enumerate(TEMPLATES):
        for seed in range(3):
            p = template(np.random.default_rng([seed, i]))
            assert _run(p.program) == p.answer, p


async def test_expert_solves_in_the_interpreter():
    env = agentgym.make("agentgym/CodeMath-v0", split="test")
    try:
        await env.reset(seed=4)
        r = await env.step(env.expert_action())
        assert r.valid and r.reward is None
        r = await env.step(env.expert_action())
        assert r.terminated and r.reward == 1.0
    finally:
        await env.aclose()


async def test_state_persists_in_episode_and_resets_between():
    env = agentgym.make("agentgym/CodeMath-v0")
    try:
        await env.reset(seed=0)
        await env.step(call("python", code="v = 41"))
        assert (await env.step(call("python", code="v + 1"))).observation[0].content == "42"
        await env.reset(seed=0)
        r = await env.step(call("python", code="v"))
        assert not r.valid and "NameError" in r.observation[0].content
    finally:
        await env.aclose()


async def test_hanging_code_is_an_invalid_observation():
    env = agentgym.make("agentgym/CodeMath-v0", call_timeout=1.0)
    try:
        await env.reset(seed=0)
        r = await env.step(call("python", code="while True: pass"))
        assert not r.valid and not r.done and "ran past 1 s" in r.observation[0].content
        r = await env.step(call("python", code=123))
        assert not r.valid and "is not of type 'string'" in r.observation[0].content
    finally:
        await env.aclose()


def test_splits_differ_and_bad_split():
    import asyncio

    async def first(split):
        env = agentgym.make("agentgym/CodeMath-v0", split=split)
        try:
            return (await env.reset(seed=1))[0][-1].content
        finally:
            await env.aclose()

    assert asyncio.run(first("train")) != asyncio.run(first("test"))
    with pytest.raises(ConfigError, match="split must be one of"):
        agentgym.make("agentgym/CodeMath-v0", split="dev")
