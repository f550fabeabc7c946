"""The MiniWoB env against MiniWoB's own page driven with MiniWoB's own primitives.

:mod:`agentgym.envs.miniwob.fidelity` plays each case through ``miniwob/<task>-v0`` at its
defaults (the task's solver, or random clicks on the snapshot), records each tool call with the
element it named, and replays the calls on the task's page in a plain Chromium page started
and driven the way MiniWoB's Python side does (``core.elementClick`` on MiniWoB's refs, key and
pointer events), its page time held equal to the env's protocol (a paused clock moved
``turn_ms`` per turn and what ``wait`` asks); page state, raw and discounted reward, the end
and success must agree. CI: a fixed sample at the default concurrency; ``-m sweep``: every task
of the package.
"""

from __future__ import annotations

import pytest
import pytest_asyncio

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

SAMPLE = ["click-checkboxes", "choose-list", "use-autocomplete", "email-inbox", "click-shape",
          "enter-date", "click-pie", "click-collapsible"]
"""Solver tasks whose translation differs most (several clicks, a drop-down, suggestions
after a delay, a scrolling inbox) and four tasks played with random clicks; the last two
(appended, so the others keep their seeds) differed while the env's click was a mouse click:
MiniWoB's click on an SVG pie item, and on a paragraph whose centre holds the submit button."""


async def test_a_fixed_sample_agrees_with_miniwobs_own_page(browser) -> None:
    from agentgym.envs.miniwob import fidelity

    comparisons = await fidelity.run(fidelity.cases(SAMPLE, 1, seed=20261127))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
    assert all(c.reference_success for c in comparisons if c.episode.endswith("[expert]"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def enter_text(browser):
    """enter-text, seed 5, through the env; and a Chromium of its own for MiniWoB's side."""
    from playwright.async_api import async_playwright

    from agentgym.envs.miniwob import fidelity
    from agentgym.envs.web.shared import CHROMIUM, CHROMIUM_ARGS

    case = fidelity.Case("enter-text", 5, "expert")
    played = await fidelity.env_run(case)
    async with async_playwright() as playwright:
        other = await playwright.chromium.launch(executable_path=CHROMIUM,
                                                 args=list(CHROMIUM_ARGS))
        try:
            yield case, played, other
        finally:
            await other.close()


async def test_a_translation_that_parts_is_reported(enter_text) -> None:
    """The comparison itself: a call MiniWoB's page is not given shows as a difference."""
    from agentgym.envs.miniwob import fidelity

    case, (steps, ok, calls, turn_ms), other = enter_text
    assert ok
    dropped = [step[1:] for step in calls]  # the typing left out
    ref, ref_ok = await fidelity.miniwob_run(case, dropped, turn_ms, other)
    found = fidelity.compare(fidelity.FAMILY, case.task, "seed 5", ref, steps,
                             reference_success=ref_ok, agentgym_success=ok)
    assert not found.agree and not ref_ok


async def test_miniwobs_page_gets_the_envs_page_time_exactly(enter_text) -> None:
    """Idle turns and a wait cost MiniWoB's page what they cost the env's, however slow the
    replay: the discounted reward is 1 - (500 + 2000 + 500) ms / the 10 s limit."""
    from agentgym.envs.miniwob import fidelity

    case, (steps, ok, calls, turn_ms), other = enter_text
    assert ok and steps[-1].score == 1.0  # solved in the first turn: no page time used
    idle = [[], [fidelity.Call("wait", {"seconds": 2})]]
    ref, ref_ok = await fidelity.miniwob_run(case, idle + list(calls), turn_ms, other)
    assert ref_ok and ref[-1].score == 1 - (turn_ms + 2000 + turn_ms) / 10_000


async def test_no_call_runs_on_miniwobs_page_once_it_ended_the_episode(enter_text) -> None:
    """As MiniWoB's own ``perform`` refuses actions on a done instance (and the env's tools
    do): typing again after the submit leaves the ended page as it was."""
    from agentgym.envs.miniwob import fidelity

    case, (steps, ok, calls, turn_ms), other = enter_text
    typing = calls[0][0]
    assert typing.name == "type"
    late = [[*calls[0], typing]]
    ref, ref_ok = await fidelity.miniwob_run(case, late, turn_ms, other)
    assert ref_ok and ref[-1].observation == steps[-1].observation


async def test_a_side_that_fails_is_a_difference_not_a_lost_run(browser) -> None:
    """One case whose env cannot be made is reported; the others are still compared."""
    from agentgym.envs.miniwob import fidelity

    comparisons = await fidelity.run([fidelity.Case("no-such-task", 1, "random"),
                                      fidelity.Case("click-test", 1, "random")])
    failed, fine = comparisons
    assert not failed.agree and "UnknownEnvError" in failed.agentgym[0].observation
    assert fine.agree


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
