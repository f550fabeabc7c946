"""LogSearch: generated logs, the id trace, tools, mistakes, splits and both contract checkers."""

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.logsearch.logs import generate
from agentgym.errors import ConfigError

ENV = "agentgym/LogSearch-v0"


def call(name, **args):
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, args),))


def test_generated_trace_is_unique_and_ordered():
    for seed in range(5):
        logs = generate(np.random.default_rng(seed), 200, 20)
        t = logs.target
        hops = [("gateway.log", f"client={t.ip} "), ("orders.log", f"req={t.req} created"),
                ("payments.log", f"order={t.order} "), (f"{t.worker}.log", f"job={t.job} ")]
        stamps = []
        for file, needle in hops:
            (line,) = [x for x in logs.files[file] if needle in x]
            stamps.append(line.split()[0])
        assert stamps == sorted(stamps)
        assert f"code={t.code}" in line
        # Decoys: many failures look the same, so the code must be traced, not grepped.
        fails = sum("failed code=" in x for f, lines in logs.files.items() for x in lines)
        assert fails == 21 and all(len(v) == 200 for v in logs.files.values())


async def test_expert_traces_the_ids_and_scores_one():
    env = agentgym.make(ENV)
    _, info = await env.reset(seed=3)
    assert info["state_key"].endswith("|0")
    keys, rewards = [], []
    while True:
        r = await env.step(env.expert_action())
        keys.append(r.info["state_key"][-1])
        rewards.append(r.reward)
        if r.done:
            break
    assert keys == ["1", "2", "3", "4", "4"]
    assert rewards == [None] * 4 + [1.0] and r.terminated and r.info["success"]


async def test_wrong_answer_scores_zero_and_reader_plan_solves_with_long_pages():
    env = agentgym.make(ENV)
    await env.reset(seed=0)
    r = await env.step(call("answer", code="E-0000"))
    assert (r.reward, r.terminated, r.info["success"]) == (0.0, True, False)
    await env.reset(seed=0)
    plan = env.reader_plan()
    assert len(plan) > 8 and all(a.tool_calls[0].name == "read" for a in plan[:-1])
    for action in plan:
        r = await env.step(action)
        if action.tool_calls[0].name == "read":
            assert len(r.observation[0].content) > 1500  # ~15 long lines a page
    assert r.reward == 1.0


async def test_grep_caps_matches_and_list_files():
    env = agentgym.make(ENV, max_matches=5)
    await env.reset(seed=0)
    r = await env.step(call("grep", file="gateway.log", pattern="INFO"))
    lines = r.observation[0].content.splitlines()
    assert len(lines) == 6 and "more matches" in lines[-1] and r.valid
    r = await env.step(call("list_files"))
    assert "worker-4.log: 400 lines, 27 pages" in r.observation[0].content
    r = await env.step(call("grep", file="orders.log", pattern="no-such-text"))
    assert r.valid and "no line of orders.log" in r.observation[0].content


@pytest.mark.parametrize(("action", "needle"), [
    (call("read", file="nginx.log", page=1), "no file 'nginx.log'"),
    (call("read", file="auth.log", page=99), "page must be between 1 and 27"),
    (call("grep", file="auth.log", pattern="  "), "pattern is empty"),
    (Message("assistant", "the code is E-1234"), "no tool call"),
])
async def test_mistakes_are_invalid_observations(action, needle):
    env = agentgym.make(ENV)
    await env.reset(seed=0)
    r = await env.step(action)
    assert not r.valid and not r.done and r.reward is None
    assert needle in r.observation[-1].content


async def test_splits_differ_and_seeds_repeat():
    a, b = agentgym.make(ENV, split="train"), agentgym.make(ENV, split="test")
    (oa, ia), (ob, ib) = await a.reset(seed=1), await b.reset(seed=1)
    assert oa != ob and ia["task_id"] != ib["task_id"]
    assert (await a.reset(seed=1))[0] == oa


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"split": "dev"}, "split must be one of"), ({"page_lines": 0}, "page_lines"),
    ({"lines_per_file": 30, "decoys": 40}, "decoys=40 needs lines_per_file >= 82"),
])
def test_bad_kwargs(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        agentgym.make(ENV, **kwargs)


async def test_contract_checkers():
    probe = agentgym.make(ENV)
    await probe.reset(seed=0)
    solution = []
    while not solution or solution[-1].tool_calls[0].name != "answer":
        solution.append(probe.expert_action())
        await probe.step(solution[-1])
    ran = await agentgym.check_env(agentgym.make(ENV), actions=solution)
    assert "determinism" in ran and "agent mistakes are observations" in ran
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(ENV)
        check_env(env.unwrapped)
        env.close()
    assert [str(w.message) for w in caught] == []
