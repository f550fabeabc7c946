"""MiniWoB tasks in real Chromium: seeding, MiniWoB's reward readout, time, bad input, checker.

Gymnasium's checker runs on ``miniwob/MiniWoB-v0`` in ``tests/test_gym_bridge.py``.
"""

from __future__ import annotations

import base64
import re

import pytest
from miniwob_helpers import call

import agentgym
from agentgym import Message
from agentgym.envs.miniwob import MiniWoBEnv

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


def button(env: MiniWoBEnv, right: bool) -> str:
    """The ref of the button the utterance asks for (or of another one)."""
    wanted = re.search(r'"(.*)"', env.utterance)[1]
    return next(e.ref for e in env.elements.values()
                if e.role == "button" and (e.name == wanted) == right)


async def test_seed_fixes_the_task_through_miniwobs_own_seeding(browser) -> None:
    async with MiniWoBEnv("click-checkboxes") as env:
        first, info = await env.reset(seed=7)
        again, _ = await env.reset(seed=7)
        other, _ = await env.reset(seed=8)
    assert first == again and first != other
    assert info["utterance"] in first[0].content and info["utterance"].startswith("Select ")
    assert info["task_id"] == "miniwob/click-checkboxes/7"
    assert info["miniwob_version"] == "1.1.0" and info["time_limit_ms"] == 10_000


async def test_reward_and_done_come_from_the_page(browser) -> None:
    async with MiniWoBEnv("click-button") as env:
        _, info = await env.reset(seed=3)
        key = info["state_key"]
        result = await env.step(call("click", ref=button(env, right=True)))
        assert result.terminated and result.reward == 1.0 and result.info["success"]
        assert result.info["raw_reward"] == 1.0
        # MiniWoB's own discount: the click came 100 ms (of 10 s) into the episode
        assert result.info["env_reward"] == pytest.approx(0.99, abs=0.011)
        assert "START" in result.observation[-1].content  # MiniWoB's cover between episodes
        assert result.info["state_key"] != key

        await env.reset(seed=3)
        result = await env.step(call("click", ref=button(env, right=False)))
        assert result.terminated and result.reward == -1.0 and not result.info["success"]


async def test_discounted_reward_and_the_time_limit_in_page_time(browser) -> None:
    async with MiniWoBEnv("click-button", reward="discounted", turn_ms=1000) as env:
        await env.reset(seed=3)
        result = await env.step(call("wait", seconds=2))  # 2 s + the 1 s turn
        assert result.reward is None and result.info["elapsed_ms"] == 3000
        result = await env.step(call("click", ref=button(env, right=True)))
        assert result.info["raw_reward"] == 1.0 and result.reward == pytest.approx(0.69, abs=0.011)

        await env.reset(seed=3)
        for _ in range(3):
            result = await env.step(call("wait", seconds=4))
            if result.done:
                break
        assert result.terminated and result.reward == -1.0 and result.info["reason"] == "timed out"
        assert "timed out" in result.observation[-1].content


async def test_nothing_runs_after_the_page_ends_the_episode(browser) -> None:
    async with MiniWoBEnv("click-button") as env:
        await env.reset(seed=5)
        right, wrong = button(env, right=True), button(env, right=False)
        both = Message("assistant", "", tool_calls=(*call("click", ref=right).tool_calls,
                                                    *call("click", ref=wrong).tool_calls))
        result = await env.step(both)
        assert result.reward == 1.0  # the second click did not restart MiniWoB's episode
        assert result.observation[1].content == "not run: the episode is already over"


async def test_agent_mistakes_are_invalid_observations(browser) -> None:
    async with MiniWoBEnv("login-user", action_timeout=1.0) as env:
        await env.reset(seed=1)
        login = next(e.ref for e in env.elements.values() if e.role == "button")
        box = next(e.ref for e in env.elements.values() if e.role == "textbox")
        for action, expected in [
            (call("click", ref="e999"), "no element with ref 'e999'"),
            (call("type", ref=login, text="x"), "not a text box"),
            (call("select", ref=box, option="a"), "not a drop-down"),
            (call("click_xy", x=5000, y=3), "outside the 320x320 page"),
            (call("wait", seconds=60), "seconds must be in (0, 5]"),
            (call("press", key="NoSuchKey"), "failed"),
            (Message("assistant", "I would log in"), "no tool call"),
        ]:
            result = await env.step(action)
            assert not result.valid and expected in result.observation[0].content, action
            assert not result.done
        result = await env.step(call("type", ref=box, text="someone"))
        assert result.valid and f"textbox [ref={box}]: someone" in result.observation[-1].content


async def test_screenshot_field_and_render(browser) -> None:
    async with MiniWoBEnv("click-tab", screenshot=True) as env:
        _, info = await env.reset(seed=0)
        png = base64.b64decode(info["screenshot"].removeprefix("data:image/png;base64,"))
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        result = await env.step(call("wait", seconds=0.1))
        assert result.info["screenshot"].startswith("data:image/png;base64,")
        assert (await env.render())[:8] == b"\x89PNG\r\n\x1a\n"
    async with MiniWoBEnv("click-tab") as env:  # text policies do not pay for screenshots
        _, info = await env.reset(seed=0)
        assert "screenshot" not in info


@pytest.mark.parametrize(("env_id", "kwargs"), [("miniwob/MiniWoB-v0", {"task": "click-button"}),
                                               ("miniwob/email-inbox-v0", {})])
async def test_contract_checks_pass(browser, env_id: str, kwargs: dict) -> None:
    def make():
        return agentgym.make(env_id, **kwargs)

    ran = await agentgym.check_env(make(), make_env=make)
    assert "determinism" in ran



async def test_typing_is_not_cut_short_by_the_action_timeout(browser) -> None:
    """The action timeout bounds waiting for the box, not the typing: text that takes longer
    to type than ``action_timeout`` (as short text does on a busy machine) arrives whole."""
    text = "abcdefghij" * 150
    async with MiniWoBEnv("enter-text", action_timeout=1.0) as env:
        await env.reset(seed=2)
        box = next(e.ref for e in env.elements.values() if e.role == "textbox")
        result = await env.step(call("type", ref=box, text=text))
        assert result.info["valid"]
        assert await env.page.evaluate("() => document.getElementById('tt').value") == text


COVER = ("() => { const d = document.createElement('div'); d.style.cssText = 'position: fixed;"
         " inset: 0; z-index: 9999'; document.body.appendChild(d); }")
"""A transparent layer over the whole page: a mouse click anywhere lands on it."""
JIGGLE = ("s => { const e = document.createElement('style'); e.textContent = '@keyframes jiggle"
          " { to { transform: translateX(20px) } } ' + s + ' { animation: jiggle 0.3s linear"
          " infinite alternate }'; document.head.appendChild(e); }")
"""Keeps the elements ``s`` selects moving (CSS animations run on the compositor's clock, not
the paused page clock), so Playwright's wait for a stable element never ends."""


async def test_a_click_by_ref_is_miniwobs_element_click(browser) -> None:
    """``click(ref)`` is MiniWoB's ``core.elementClick``: a covered element is still clicked (a
    mouse would hit the cover), and the answer says a mouse would miss it; an element with no
    size (no MiniWoB ref) or one gone since the snapshot is not clicked, an agent mistake."""
    async with MiniWoBEnv("click-button", action_timeout=1.0) as env:
        await env.reset(seed=3)
        await env.page.evaluate(COVER)
        result = await env.step(call("click", ref=button(env, right=True)))
        assert result.valid and result.info["success"]
        assert "covered: a mouse click there would miss it" in result.observation[0].content
        await env.reset(seed=3)
        await env.page.evaluate("() => document.querySelectorAll('#area button')"
                                ".forEach(b => b.style.display = 'none')")
        result = await env.step(call("click", ref=button(env, right=True)))
        assert not result.valid and "is not shown" in result.observation[0].content
        assert not result.done
        await env.reset(seed=3)  # gone since the snapshot: said at once, not after a wait
        await env.page.evaluate("() => document.querySelector('#area').replaceChildren()")
        result = await env.step(call("click", ref=button(env, right=True)))
        assert not result.valid and "no longer on the page" in result.observation[0].content


@pytest.mark.parametrize(("task", "seed", "moving"), [
    ("click-checkboxes", 1001, "#boxes input"),  # three boxes to tick
    ("click-tab", 1000, "#area ul a"),
])
async def test_a_solvers_clicks_are_not_lost_to_the_action_timeout(browser, task: str, seed: int,
                                                                   moving: str) -> None:
    """A click is one call on the page, not Playwright's wait for a stable, unobscured element
    under ``action_timeout``: on a busy machine that wait ran out, a box stayed unticked
    (0.5 for 1.0) or a tab took a second turn. Elements that never stop moving stand in for
    the busy machine here."""
    async with MiniWoBEnv(task, action_timeout=1.0) as env:
        await env.reset(seed=seed)
        await env.page.evaluate(JIGGLE, moving)
        result = await env.step(await env.expert_action())
        assert result.valid and result.done and result.info["raw_reward"] == 1.0
