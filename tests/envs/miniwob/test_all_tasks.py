"""Every task of the package loads, resets and steps in the browser.

The sweep over all 130 tasks is marked ``sweep`` (run by hand: ``pytest -m sweep
tests/envs/miniwob``); the default run takes a fixed sample across the kinds of task.
"""

from __future__ import annotations

import pytest
from miniwob_helpers import call

from agentgym.envs.miniwob import MiniWoBEnv, task_names
from agentgym.errors import MissingExtraError

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

SAMPLE = ("book-flight", "click-checkboxes-soft", "drag-items", "email-inbox-forward-nl-turk",
          "simon-says", "terminal", "text-editor", "use-colorwheel")
"""Forms, partial rewards, drag, natural-language mail, a timed game, typing, rich text, canvas."""

try:
    EVERY = task_names()
except MissingExtraError:  # collected without the package: the fixture skips
    EVERY = ()


async def _load_reset_step(task: str) -> None:
    async with MiniWoBEnv(task) as env:
        observation, info = await env.reset(seed=11)
        assert info["utterance"] and info["utterance"] in observation[0].content
        assert env.elements and info["time_limit_ms"] > 0
        assert info["state_key"].startswith(f"{task}#")
        last = list(env.elements)[-1]
        result = await env.step(call("click", ref=last))  # valid or not, it must not fault
        assert result.observation and "elapsed_ms" in result.info
        if not result.done:
            result = await env.step(call("wait", seconds=0.2))
            assert result.valid and result.observation[-1].content


@pytest.mark.parametrize("task", SAMPLE)
async def test_sampled_tasks_load_reset_and_step(browser, task: str) -> None:
    await _load_reset_step(task)


@pytest.mark.sweep
@pytest.mark.parametrize("task", EVERY)
async def test_every_task_loads_resets_and_steps(browser, task: str) -> None:
    await _load_reset_step(task)
