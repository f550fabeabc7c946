"""The browser web env in real Chromium: oracle, contract, parity with text, bad input, faults."""

from __future__ import annotations

import asyncio

import pytest
from web_oracle import KW, play

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.web import WebShopEnv, WebShopTextEnv, order_reward

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


def call(name: str, **arguments: object) -> Message:
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, arguments),))



@pytest.mark.parametrize("split", ["train", "test"])
async def test_oracle_scores_one_on_sampled_tasks(shared_browser, split: str) -> None:
    async with WebShopEnv(split, **KW) as env:
        for seed in range(3):
            result, turns = await play(env, seed)
            assert result.terminated and result.reward == 1.0 and result.info["success"]
            assert turns <= 9 and env.state_key().startswith("/order#")


async def test_contract_checks_pass(shared_browser) -> None:
    ran = await agentgym.check_env(agentgym.make("agentgym/WebShop-v0", **KW),
                                   make_env=lambda: agentgym.make("agentgym/WebShop-v0", **KW))
    assert "determinism" in ran


async def test_text_and_browser_score_the_same_purchase(shared_browser) -> None:
    text, browser = WebShopTextEnv(**KW), WebShopEnv(**KW)
    try:
        for seed in (3, 8):
            await text.reset(seed=seed)
            task, catalog = text.task, text.site.catalog
            goal = catalog.get(task.goal_id)
            kind = next(iter(task.options))
            wrong = {**task.options,
                     kind: next(v for v in goal.options[kind] if v != task.options[kind])}
            cousin = next(p for p in catalog.products
                          if p.product_type == task.product_type and p.id != goal.id)
            for buy in [(goal.id, wrong),
                        (cousin.id, {k: v[0] for k, v in cousin.options.items()})]:
                a, _ = await play(text, seed, buy)
                b, _ = await play(browser, seed, buy)
                expected = order_reward(task, [(catalog.get(buy[0]), buy[1])])
                assert a.reward == b.reward == pytest.approx(expected)
                assert a.info["purchased"] == b.info["purchased"] == [buy[0]]
            assert (await play(text, seed))[0].reward == (await play(browser, seed))[0].reward
    finally:
        await text.aclose()
        await browser.aclose()


async def stall(route) -> None:
    """A route handler that keeps the request waiting: the page hangs."""
    await asyncio.sleep(5)
    try:
        await route.abort()
    except Exception:  # the env stopped the load (or closed the page) meanwhile
        pass


async def test_bad_input_is_an_invalid_observation(shared_browser) -> None:
    async with WebShopEnv(action_timeout=1.5, **KW) as env:
        await env.reset(seed=4)
        link = next(e.ref for e in env.elements.values() if e.name == "Home")
        policies = next(e.ref for e in env.elements.values() if e.name == "Shop policies")
        for action, expected in [
            (call("click", ref="e999"), "no element with ref 'e999'"),
            (call("type", ref=link, text="hello"), "not a text box"),
            (call("select", ref=link, option="m"), "not a drop-down"),
            (call("click", ref=policies), "leads off the shop"),
            (call("go_back"), "no previous page"),
            (Message("assistant", "what now?"), "no tool call"),
        ]:
            result = await env.step(action)
            assert not result.valid and expected in result.observation[0].content, action
            assert result.info["state_key"].startswith("/#") and not result.done
        # A page that never loads in time: loading stops, the agent stays where it was.
        for _ in range(2):  # type the query, press Search
            await env.step(env.expert_action())
        assert env.facts().path == "/search"
        await env.page.route("**/product/**", stall)
        result = await env.step(env.expert_action())  # open the product: it hangs
        assert not result.valid and "did not finish within 1.5 s" in result.observation[0].content
        assert env.state_key().startswith("/search#")
        await env.page.unroute_all(behavior="ignoreErrors")
        for _ in range(12):  # the episode goes on: the oracle still buys
            result = await env.step(env.expert_action())
            assert result.valid, result.observation[0].content
            if result.done:
                break
        assert result.reward == 1.0


async def test_select_rejects_an_unknown_option_and_render_gives_png(shared_browser) -> None:
    async with WebShopEnv(**KW) as env:
        await env.reset(seed=6)
        while env.facts().path.split("/")[1:2] != ["product"]:
            await env.step(env.expert_action())
        box = next(e for e in env.elements.values() if e.role == "combobox")
        result = await env.step(call("select", ref=box.ref, option="no such option"))
        assert not result.valid and "has no option 'no such option'" in \
            result.observation[0].content
        png = await env.render()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


async def test_cancelled_step_still_closes_the_context(shared_browser) -> None:
    env = WebShopEnv(action_timeout=3, **KW)
    try:
        await env.reset(seed=0)
        assert env._tab.handle is shared_browser
        contexts = len(shared_browser.browser.contexts)
        await env.page.route("**/search**", stall)
        box = next(e.ref for e in env.elements.values() if e.role == "textbox")
        slow = call("type", ref=box, text="tea", submit=True)
        step = asyncio.ensure_future(env.step(slow))
        await asyncio.sleep(0.5)
        step.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step
    finally:
        await env.aclose()
    assert len(shared_browser.browser.contexts) == contexts - 1
    assert shared_browser.browser.is_connected()
