"""Web env checks that run outside the shared test loop: Gymnasium's checker, faults, leaks."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from process_fixtures import end_group
from web_oracle import KW, play

import agentgym
from agentgym.envs.web import WebShopEnv
from agentgym.envs.web.shared import browser_processes
from agentgym.rollout import run_episode


@pytest.mark.parametrize("env_id", [
    "agentgym/WebShopText-v0",
    pytest.param("agentgym/WebShop-v0", marks=[pytest.mark.browser, pytest.mark.slow]),
])
def test_gymnasium_checker_passes(env_id: str) -> None:
    env = gymnasium.make(env_id, **KW)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            gym_check_env(env.unwrapped)
    finally:
        env.close()


class _KillBrowserAgent:
    """Follows the oracle, but kills the browser process before its third action."""

    def start(self, prompt, env):
        return self

    def __init__(self, env: WebShopEnv) -> None:
        self.env, self.turn = env, 0

    async def act(self):
        self.turn += 1
        if self.turn == 3:
            cdp = await self.env._tab.handle.browser.new_browser_cdp_session()
            info = await cdp.send("SystemInfo.getProcessInfo")
            pid = next(p["id"] for p in info["processInfo"] if p["type"] == "browser")
            os.kill(pid, signal.SIGKILL)  # the browser this test's own loop launched
            await asyncio.sleep(0.5)
        return self.env.expert_action(), None

    def observe(self, observation) -> None:
        pass


@pytest.mark.browser
def test_crashed_browser_gives_an_error_trajectory() -> None:
    async def main():  # a loop (and so a browser) of its own, not the shared one
        env = WebShopEnv(**KW)
        try:
            traj = await run_episode(env, _KillBrowserAgent(env), seed=0, group_id="g")
        finally:
            await env.aclose()
        # a new env on the same loop gets a fresh browser that works
        async with WebShopEnv(**KW) as fresh:
            result, _ = await play(fresh, 0)
        return traj, result

    traj, result = asyncio.run(main())
    assert traj.status == "error" and traj.outcome_reward is None
    assert "crashed" in traj.error or "closed" in traj.error
    assert len(traj.steps) == 2 and result.reward == 1.0


@pytest.mark.browser
def test_scripted_rollout_leaves_no_browser_process(tmp_path) -> None:
    out = tmp_path / "rollout.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli", "rollout", "agentgym/WebShop-v0", "--policy",
         "scripted", "--episodes", "2", "--concurrency", "2", "--kw", "catalog_size=1000",
         "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=600)  # minutes only on a loaded machine
    except subprocess.TimeoutExpired:
        end_group(proc)  # a hung rollout is not left running
        raise
    assert proc.returncode == 0, output
    trajs = [agentgym.Trajectory.from_json(line) for line in out.read_text().splitlines()]
    assert [t.outcome_reward for t in trajs] == [1.0, 1.0]
    assert browser_processes(owner=proc.pid) == []
