"""The text web env: oracle, contract checks, actions, bad input, session isolation."""

from __future__ import annotations

import pytest
from web_oracle import KW, play

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.web import WebShopTextEnv

pytestmark = pytest.mark.asyncio(loop_scope="session")



@pytest.mark.parametrize("split", ["train", "test"])
async def test_oracle_scores_one_on_sampled_tasks(web_shared, split: str) -> None:
    async with WebShopTextEnv(split, **KW) as env:
        for seed in range(6):
            result, turns = await play(env, seed)
            assert result.terminated and result.reward == 1.0 and result.info["success"]
            assert result.info["purchased"] == [env.task.goal_id] and turns <= 8


async def test_contract_checks_pass(web_shared) -> None:
    ran = await agentgym.check_env(agentgym.make("agentgym/WebShopText-v0", **KW),
                                   make_env=lambda: agentgym.make("agentgym/WebShopText-v0", **KW))
    assert "determinism" in ran


async def test_webshop_text_actions_and_state_keys(web_shared) -> None:
    async with WebShopTextEnv(**KW) as env:
        prompt, info = await env.reset(seed=2)
        assert "search[" in prompt[0].content and info["task_id"] == "webshop-train-2"
        first_key = env.state_key()
        assert first_key.startswith("/#")
        result = await env.step(Message("assistant", "I will look. search[waterproof jacket]"))
        assert result.valid and result.reward is None and not result.done
        assert result.info["state_key"].startswith("/search#")
        assert 'Results for "waterproof jacket"' in result.observation[-1].content
        result = await env.step(Message("assistant", "click[Next >]"))
        assert result.valid and "Page 2 of" in result.observation[-1].content
        again = WebShopTextEnv(**KW)
        try:  # same page, same key, in another episode and session
            await again.reset(seed=2)
            assert again.state_key() == first_key
        finally:
            await again.aclose()


async def test_bad_input_is_an_invalid_observation(web_shared) -> None:
    async with WebShopTextEnv(**KW) as env:
        await env.reset(seed=0)
        for action, expected in [
            (Message("assistant", "click[No such button]"), "no element labelled"),
            (Message("assistant", "click[Shop policies]"), "leads off the shop"),
            (Message("assistant", "", tool_calls=(ToolCall("c", "search", {"query": " "}),)),
             "query is empty"),
            (Message("assistant", "I do not know"), "no tool call"),
        ]:
            result = await env.step(action)
            assert not result.valid and expected in result.observation[0].content
            assert not result.done and result.info["state_key"].startswith("/#")


async def test_finish_ends_without_reward(web_shared) -> None:
    async with WebShopTextEnv(**KW) as env:
        await env.reset(seed=0)
        result = await env.step(Message("assistant", "", tool_calls=(ToolCall("c", "finish", {}),)))
        assert result.terminated and result.reward == 0.0 and not result.info["success"]


async def test_missing_option_is_refused_by_the_site(web_shared) -> None:
    async with WebShopTextEnv(**KW) as env:
        await env.reset(seed=5)
        for _ in range(2):  # search, open the goal
            await env.step(env.expert_action())
        result = await env.step(Message("assistant", "click[Add to cart]"))
        assert result.valid and "Please choose a" in result.observation[-1].content
        assert env._cart() == []


async def test_sessions_are_isolated(web_shared) -> None:
    a, b = WebShopTextEnv(**KW), WebShopTextEnv(**KW)
    try:
        await a.reset(seed=1)
        await b.reset(seed=1)
        while not a._cart():  # a fills its cart; b's stays empty
            await a.step(a.expert_action())
        result = await b.step(Message("assistant", "click[Cart (0)]"))
        assert "Your cart is empty" in result.observation[-1].content
        assert a.site is b.site  # one server for both
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_language_model_policy_runs_episodes(web_shared, tiny_model_dir) -> None:
    from agentgym.policies import SamplingParams, make_agent
    from agentgym.rollout import RolloutConfig, run_groups

    agent = make_agent(f"hf:{tiny_model_dir}", seed=0,
                       sampling=SamplingParams(temperature=0.0, max_tokens=16))
    trajs = await run_groups(lambda: agentgym.make("agentgym/WebShopText-v0", max_turns=2, **KW),
                             agent, [0, 1], RolloutConfig(max_steps=2),
                             env_id="agentgym/WebShopText-v0")
    for traj in trajs:  # a random tiny model buys nothing, but every step is recorded
        assert traj.status == "truncated" and traj.outcome_reward == 0.0, traj.error
        assert len(traj.steps) == 2 and all(s.tokens is not None for s in traj.steps)
        assert traj.steps[0].state_key.startswith("/#")
