import numpy as np
import pytest

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.arithmetic import evaluate
from agentgym.envs.arithmetic.tasks import TEMPLATES
from agentgym.errors import ConfigError


def call(name, **args):
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, args),))


@pytest.mark.parametrize("expr,value", [("2+3*4", 14), ("(2+3)*4", 20), ("7/2", 3.5),
                                        ("1/3*3", 1), ("-5 // 2", -3), ("2**10", 1024),
                                        ("17 % 5", 2), ("1.5*2", 3)])
def test_evaluate_is_exact(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize("expr", ["import os", "__import__('os')", "2**1000", "1/0", "x+1",
                                  "(1", "9" * 600, "2**0.5"])
def test_evaluate_rejects(expr):
    with pytest.raises(ValueError):
        evaluate(expr)


def test_every_template_chain_reaches_the_answer():
    for i, template in enumerate(TEMPLATES):
        for seed in range(30):
            p = template(np.random.default_rng([seed, i]))
            assert evaluate(p.steps[-1]) == p.answer, p
            # some intermediate product is too big to do in one's head
            assert max(abs(evaluate(e)) for e in p.steps) >= 1000, p


async def test_expert_solves_and_gets_reward_one():
    env = agentgym.make("agentgym/Arithmetic-v0")
    await env.reset(seed=7)
    rewards = []
    while True:
        r = await env.step(env.expert_action())
        rewards.append(r.reward)
        if r.done:
            break
    assert rewards[-1] == 1.0 and all(x is None for x in rewards[:-1])
    assert r.terminated and r.info["success"] is True


async def test_wrong_answer_scores_zero_and_ends():
    env = agentgym.make("agentgym/Arithmetic-v0")
    await env.reset(seed=7)
    r = await env.step(call("answer", value=-1.5))
    assert (r.reward, r.terminated, r.info["success"]) == (0.0, True, False)


async def test_splits_differ_and_seeds_are_deterministic():
    a = agentgym.make("agentgym/Arithmetic-v0", split="train")
    b = agentgym.make("agentgym/Arithmetic-v0", split="test")
    (oa, ia), (ob, ib) = await a.reset(seed=1), await b.reset(seed=1)
    assert oa != ob and ia["task_id"] != ib["task_id"]
    assert (await a.reset(seed=1))[0] == oa


async def test_state_key_tracks_results():
    env = agentgym.make("agentgym/Arithmetic-v0")
    _, info = await env.reset(seed=0)
    r = await env.step(call("calculator", expression="6*7"))
    assert r.info["state_key"] == info["state_key"] + "42"


async def test_mistakes_are_observations():
    env = agentgym.make("agentgym/Arithmetic-v0")
    await env.reset(seed=0)
    for action, needle in [
        (Message("assistant", "the answer is 12"), "no tool call"),
        (call("calc", expression="1"), "did you mean 'calculator'"),
        (call("calculator", expression=12), "is not of type 'string'"),
        (call("calculator"), "'expression' is a required property"),
        (call("calculator", expression="1/0"), "division by zero"),
        (Message("assistant", '<tool_call>{"name": "calculator", "arguments": {"expr'),
         "malformed JSON"),
    ]:
        r = await env.step(action)
        assert not r.valid and not r.done, action
        assert needle in r.observation[0].content


def test_bad_split():
    with pytest.raises(ConfigError, match="split must be one of"):
        agentgym.make("agentgym/Arithmetic-v0", split="dev")


def test_turn_limit_truncates():
    import asyncio

    async def main():
        env = agentgym.make("agentgym/Arithmetic-v0", max_turns=2)
        await env.reset(seed=0)
        await env.step(call("calculator", expression="1"))
        return await env.step(call("calculator", expression="1"))

    r = asyncio.run(main())
    assert r.truncated and not r.terminated


async def test_mental_math_reads_a_5000_digit_reply_as_a_wrong_answer():
    env = agentgym.make("agentgym/MentalMath-v0")
    await env.reset(seed=0)
    result = await env.step(Message("assistant", "9" * 5000))  # int() would raise here
    assert result.valid and result.reward == 0.0 and len(result.observation[0].content) < 200
    await env.reset(seed=0)
    answer = env.unwrapped.answer if hasattr(env, "unwrapped") else env.env.env.answer
    result = await env.step(Message("assistant", f"it is 000{answer}"))
    assert result.reward == 1.0
