"""Chromium killed under a batch of concurrent episodes: every one ends promptly as an error.

Runs on an event loop of its own (a browser of its own), like ``test_outside_loop.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from web_oracle import KW

from agentgym.envs.web import WebShopEnv
from agentgym.rollout import RolloutConfig, run_groups


class _KillOnce:
    """Follows the oracle; episode 1 kills the shared Chromium before its third action and
    the others wait for that before their third action, so the crash hits them mid-episode."""

    def __init__(self) -> None:
        self.started, self.killed = 0, asyncio.Event()

    def start(self, prompt, env):
        self.started += 1
        return _Episode(self, env, self.started)


class _Episode:
    def __init__(self, agent: _KillOnce, env: WebShopEnv, number: int) -> None:
        self.agent, self.env, self.number, self.turn = agent, env, number, 0

    async def act(self):
        self.turn += 1
        if self.turn == 3 and self.number == 1:
            cdp = await self.env._tab.handle.browser.new_browser_cdp_session()
            info = await cdp.send("SystemInfo.getProcessInfo")
            pid = next(p["id"] for p in info["processInfo"] if p["type"] == "browser")
            os.kill(pid, signal.SIGKILL)  # the browser this test's own loop launched
            self.agent.killed.set()
            await asyncio.sleep(0.5)
        elif self.turn == 3:
            await self.agent.killed.wait()
        return self.env.expert_action(), None

    def observe(self, observation) -> None:
        pass


@pytest.mark.browser
def test_a_killed_browser_ends_every_episode_of_the_batch_promptly():
    async def main():
        started = time.perf_counter()
        trajs = await run_groups(lambda: WebShopEnv(**KW), _KillOnce(), [0, 1, 2],
                                 RolloutConfig(concurrency=3, step_timeout=120))
        return trajs, time.perf_counter() - started

    trajs, seconds = asyncio.run(main())
    assert [t.status for t in trajs] == ["error"] * 3
    assert seconds < 90  # none waited for the 120 s step timeout
    for t in trajs:
        assert t.outcome_reward is None and "browser crashed" in t.error, t.error
        assert "Browser logs" not in t.error and not t.error.startswith("TargetClosedError")
