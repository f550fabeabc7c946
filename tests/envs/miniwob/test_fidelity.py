"""The MiniWoB env against MiniWoB's own page driven with MiniWoB's own primitives.

:mod:`agentgym.envs.miniwob.fidelity` plays each case through ``miniwob/<task>-v0`` at its
defaults (the task's solver, or random clicks on the snapshot), records each tool call with the
element it named, and replays the calls on the task's page in a plain Chromium page started
and driven the way MiniWoB's Python side does (``core.elementClick`` on MiniWoB's refs, key and
pointer events, the page's real clock); page state, raw reward, the end and success must agree.
CI: a fixed sample; ``-m sweep``: every task of the package.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

SAMPLE = ["click-checkboxes", "choose-list", "use-autocomplete", "email-inbox", "click-shape",
          "enter-date"]
"""Solver tasks whose translation differs most (several clicks, a drop-down, suggestions
after a delay, a scrolling inbox) and two tasks played with random clicks."""


async def test_a_fixed_sample_agrees_with_miniwobs_own_page(browser) -> None:
    from agentgym.envs.miniwob import fidelity

    comparisons = await fidelity.run(fidelity.cases(SAMPLE, 1, seed=20261127))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
    assert all(c.reference_success for c in comparisons if c.episode.endswith("[expert]"))


async def test_a_translation_that_parts_is_reported(browser) -> None:
    """The comparison itself: a call MiniWoB's page is not given shows as a difference."""
    from playwright.async_api import async_playwright

    from agentgym.envs.miniwob import fidelity
    from agentgym.envs.web.shared import CHROMIUM, CHROMIUM_ARGS

    case = fidelity.Case("enter-text", 5, "expert")
    steps, ok, calls, turn_ms = await fidelity.env_run(case)
    assert ok
    async with async_playwright() as playwright:
        other = await playwright.chromium.launch(executable_path=CHROMIUM,
                                                 args=list(CHROMIUM_ARGS))
        try:
            dropped = [step[1:] for step in calls]  # the typing left out
            ref, ref_ok = await fidelity.miniwob_run(case, dropped, turn_ms, other)
        finally:
            await other.close()
    found = fidelity.compare(fidelity.FAMILY, case.task, "seed 5", ref, steps,
                             reference_success=ref_ok, agentgym_success=ok)
    assert not found.agree and not ref_ok


@pytest.mark.sweep
async def test_sweep_every_task_agrees(browser) -> None:
    from agentgym.envs.miniwob import fidelity
    from agentgym.envs.miniwob.experts import SOLVERS
    from agentgym.envs.miniwob.tasks import task_names

    comparisons = await fidelity.run(fidelity.cases(list(task_names()), 1, seed=0)
                                     + fidelity.cases(sorted(SOLVERS), 5, seed=1))
    print(fidelity.summary_line(fidelity.FAMILY, comparisons))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
