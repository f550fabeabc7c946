"""Browser faults end the episode as an error trajectory; no Chromium outlives a run.

These tests start their own Chromium (no module fixture holds one), kill or hang it, and
check afterwards that every browser process they caused has exited.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence

import pytest
from miniwob_helpers import call, needs_browser, settle

from agentgym import Message
from agentgym.envs.miniwob import MiniWoBEnv
from agentgym.envs.web.shared import browser_processes
from agentgym.policies.factory import make_agent
from agentgym.rollout import RolloutConfig, run_groups

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]
CONFIG = RolloutConfig(concurrency=3, max_steps=4, close_timeout=30)


class Saboteur:
    """An agent whose first act breaks the browser, then clicks a button."""

    def __init__(self, how: str, before: set[int]) -> None:
        self.how, self.before = how, before

    def start(self, prompt: Sequence[Message], env: MiniWoBEnv) -> Saboteur:
        self.env = env
        return self

    async def act(self) -> tuple[Message, None]:
        env = self.env.unwrapped if hasattr(self.env, "unwrapped") else self.env
        if self.how == "kill":
            for pid in sorted(set(browser_processes()) - self.before):
                os.kill(pid, signal.SIGKILL)  # only the browser this test started
            await asyncio.sleep(0.5)
        else:  # every button now runs forever: the page stops answering
            await env.page.evaluate("() => document.querySelectorAll('button').forEach(b => "
                                    "b.addEventListener('click', () => { for (;;) {} }))")
        ref = next(e.ref for e in env.elements.values() if e.role == "button")
        return call("click", ref=ref), None

    def observe(self, observation: Sequence[Message]) -> None:
        pass


@pytest.mark.parametrize("how", ["kill", "hang"])
async def test_a_killed_or_hung_browser_is_an_error_trajectory(how: str, monkeypatch) -> None:
    needs_browser()
    # a hang is detected at the hang limit whatever it is; 20 s instead of 60 keeps the wait
    # short and still far above any operation of this task on a busy machine
    monkeypatch.setattr("agentgym.envs.miniwob.env.HANG_S", 20.0)
    before = set(browser_processes())
    trajectories = await run_groups(lambda: MiniWoBEnv("click-button", action_timeout=1.0),
                                    Saboteur(how, before), [0], CONFIG, env_id="miniwob")
    (trajectory,) = trajectories
    assert trajectory.status == "error" and trajectory.outcome_reward is None
    assert "MiniWoBError" in trajectory.error
    assert await settle(before) == []


async def test_no_chromium_survives_a_rollout() -> None:
    needs_browser()
    before = set(browser_processes())
    trajectories = await run_groups(lambda: MiniWoBEnv("click-checkboxes"),
                                    make_agent("random", seed=1), range(3), CONFIG,
                                    env_id="miniwob")
    assert [t.status for t in trajectories].count("error") == 0
    assert await settle(before) == []


async def test_a_page_that_loads_slowly_is_waited_for_up_to_the_hang_limit(tmp_path) -> None:
    """A busy machine slows a page load past Playwright's 30 s default; the env waits for it.

    The task page here is click-button's with one more script, read from a named pipe that
    gets its (empty) content 35 s after the reset starts: a load that takes longer than 30 s
    and well under the env's hang limit (``action_timeout`` + 60 s).
    """
    needs_browser()
    from agentgym.envs.miniwob.tasks import task_page

    original = task_page("click-button")
    for folder in ("core", "common"):
        (tmp_path / folder).symlink_to(original.parent.parent / folder)
    (tmp_path / "miniwob").mkdir()
    page = tmp_path / "miniwob" / original.name
    page.write_text(original.read_text().replace(
        "</head>", '<script src="slow.js"></script>\n</head>', 1))
    os.mkfifo(tmp_path / "miniwob" / "slow.js")

    async def feed() -> None:
        await asyncio.sleep(35)
        try:  # non-blocking: if the page is gone there is no reader, and nothing to feed
            os.close(os.open(tmp_path / "miniwob" / "slow.js", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass

    before = set(browser_processes())
    env = MiniWoBEnv("click-button")
    env.page_path = page
    try:
        (_, info), _ = await asyncio.gather(env.reset(seed=3), feed())
        assert info["utterance"].startswith("Click on the")
    finally:
        await env.aclose()
    assert await settle(before) == []
