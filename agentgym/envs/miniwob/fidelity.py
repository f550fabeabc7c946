"""Differential check: the MiniWoB env against MiniWoB's own page driven the way MiniWoB does.

MiniWoB's engine is its page: each task's generator, reward function and timer are its
JavaScript. Its own Python side (Selenium) starts an episode with ``Math.seedrandom(seed);
core.setDataMode("train"); core.startEpisodeReal()`` and acts with its own primitives:
``core.getDOMInfo()`` numbers the elements (``data-wob_ref``), ``core.elementClick(ref)``
clicks one (``element.click()`` and focus), key events type, pointer events click at
coordinates or scroll. For one (task, seed) and one policy, two runs:

- **agentgym**: ``miniwob/<task>-v0`` made with default kwargs, its episodes in flight at once
  up to the rollout default concurrency; the policy (the task's scripted solver, or random
  clicks on the snapshot's refs) acts through the env's tools on its snapshot refs, and each
  call is recorded with the element it named (its position in the DOM tree);
- **MiniWoB**: the task's page from the installed package in a plain Chromium page (no
  agentgym code), started as MiniWoB's Python side starts it, with each recorded call
  translated to MiniWoB's primitives: ``click`` -> ``core.elementClick`` on the element's
  MiniWoB ref; ``type`` -> ``core.elementClick`` then key events; ``press`` -> a key event;
  ``click_xy``/``drag`` -> pointer events. MiniWoB has no select or scroll-box primitive, so
  ``select`` focuses with ``core.elementClick`` and picks the option as the browser does
  (``selected``, then ``input`` and ``change`` events), and ``scroll`` sets the box to the
  offset the env's scroll reached. As MiniWoB's own ``perform`` does, no call runs once
  the page has ended the episode.

**Time.** The page's JavaScript (generator, reward function, timer) runs unchanged; only the
clock it reads is held equal to the env's protocol: a paused Playwright clock that moves
``turn_ms`` after each step the episode is still running and what ``wait`` asks for, the same
calls the env makes on its own page. MiniWoB's own harness runs the page's real clock instead,
which makes its outcome depend on how fast the machine replays (a first sweep so run, at
load average 20, had 47 of 215 episodes end differently; the 19 of them rerun at a
concurrency of 4 all agreed). So this check compares how the two sides act and score when
they are given the same time; that a turn is worth ``turn_ms`` of page time is the env's
protocol (``docs/miniwob.md``), which a replay cannot check.

Compared at every step as :class:`~agentgym.fidelity.StepRecord`: the page state (the task
area's text and every field's value or check, read with the same script on both pages; at the
reset also the utterance), the raw reward when the page ends the episode (None before), the
time-discounted reward as the score (MiniWoB's ``WOB_REWARD_GLOBAL``: equal only if the page
time used is), ``terminated``; then success (raw reward 1). Not compared: the env's snapshot
text (a rendering of the same page, checked through the page state instead).

Run ``python -m agentgym.envs.miniwob.fidelity --help``; tests in
``tests/envs/miniwob/test_fidelity.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from agentgym.envs.miniwob.experts import SOLVERS
from agentgym.envs.miniwob.tasks import task_names, task_page
from agentgym.fidelity import Comparison, StepRecord, compare, summarize, summary_line, table
from agentgym.types import Message, ToolCall

if TYPE_CHECKING:
    from agentgym.envs.miniwob.env import MiniWoBEnv
    from agentgym.wrappers import Wrapper

FAMILY = "miniwob"
MAX_STEPS = 12
"""Steps per episode at most (the solvers need a few; random play is cut here)."""
PAGE_STATE = """() => {
  const area = document.getElementById('area') || document.body;
  const fields = [...area.querySelectorAll('input, textarea, select')].map(e =>
      (e.type === 'checkbox' || e.type === 'radio') ? (e.checked ? 'x' : 'o') : e.value);
  return (area.innerText || '').replace(/\\s+/g, ' ').trim() + ' || ' + fields.join(' | ');
}"""
"""What the page shows: the task area's text and its fields (same script on both pages)."""
DOM_PATH = """e => { const p = [];
  while (e && e !== document.body) { p.unshift([...e.parentElement.children].indexOf(e));
                                     e = e.parentElement; }
  return p; }"""
FIND = "p => { let e = document.body; for (const i of p) e = e && e.children[i]; return e; }"
READ = "() => [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_GLOBAL]"


@dataclass(frozen=True)
class Case:
    """One task instance and a policy (``expert``: the task's solver; ``random``)."""

    task: str
    seed: int
    policy: str


@dataclass(frozen=True)
class Call:
    """One tool call the env side made, with the DOM position of the element it named.

    Attributes:
        name: The tool.
        arguments: Its arguments.
        path: Child indices from ``<body>`` to the named element (None: no element).
        offset: For ``scroll``: the offset the box reached in the env.
    """

    name: str
    arguments: dict[str, Any]
    path: tuple[int, ...] | None = None
    offset: int | None = None


# -- agentgym's side -----------------------------------------------------------------------

async def _random_action(env: Any, rng: random.Random) -> Message:
    refs = sorted(env.elements)
    ref = rng.choice(refs) if refs else None
    if ref is None:
        return Message("assistant", "", tool_calls=(ToolCall("c0", "wait", {"seconds": 1}),))
    return Message("assistant", "", tool_calls=(ToolCall("c0", "click", {"ref": ref}),))


async def _record(env: Any, call: ToolCall) -> Call:
    """The call with the DOM position of the element its ``ref`` names (before it acts)."""
    ref = call.arguments.get("ref") if isinstance(call.arguments, dict) else None
    if not isinstance(ref, str) or ref not in env.elements:
        return Call(call.name, dict(call.arguments))
    from agentgym.envs.miniwob.experts import read_timeout_ms

    locator = env.locator(env.element(ref))
    if not await locator.count():  # gone since the snapshot: the env refuses it, no element
        return Call(call.name, dict(call.arguments))
    # not Playwright's 30 s default: a busy machine slows this read, it does not end the run
    path = await locator.evaluate(DOM_PATH, timeout=read_timeout_ms(env))
    return Call(call.name, dict(call.arguments), tuple(path))


async def env_run(case: Case) -> tuple[list[StepRecord], bool, list[list[Call]], int]:
    """The env at its defaults on the case.

    Returns its steps, its success, the calls of each step, and the page time a turn takes
    in milliseconds.
    """
    import agentgym

    rng = random.Random(f"{case.task}:{case.seed}")
    env = agentgym.make(f"miniwob/{case.task}-v0")
    # the registry caps its turns (a MaxTurns wrapper); the MiniWoB env is inside
    inner = cast("MiniWoBEnv", cast("Wrapper", env).unwrapped)
    steps, calls, success = [], [], False
    try:
        await env.reset(seed=case.seed)
        state = await inner.page.evaluate(PAGE_STATE)
        steps.append(StepRecord("(reset)", f"{inner.utterance} || {state}", None, None, False,
                                False))
        for _ in range(MAX_STEPS):
            action = (await inner.expert_action() if case.policy == "expert"
                      else await _random_action(inner, rng))
            recorded = [await _record(inner, c) for c in action.tool_calls]
            result = await env.step(action)
            for i, c in enumerate(recorded):
                if c.name == "scroll":
                    text = result.observation[i].content if i < len(result.observation) else ""
                    recorded[i] = Call(c.name, c.arguments, c.path, _offset(text))
            calls.append(recorded)
            state = await inner.page.evaluate(PAGE_STATE)
            raw = result.info.get("raw_reward") if result.done else None
            discounted = result.info.get("env_reward") if result.done else None
            steps.append(StepRecord(_describe(recorded, result.observation), state, raw,
                                    discounted, result.terminated, result.truncated))
            if result.done:
                success = bool(result.info.get("success"))
                break
        return steps, success, calls, inner.turn_ms
    finally:
        await env.aclose()


def _offset(text: str) -> int | None:
    """The offset in the scroll tool's answer (``... now at 120 px``)."""
    tail = text.rsplit("now at ", 1)
    return int(tail[1].split()[0]) if len(tail) == 2 and tail[1].split() else None


def _describe(calls: Sequence[Call], answers: Sequence[Message] = ()) -> str:
    """The calls as text; with the env's answers, a call it refused says why (``refused:``)."""
    said = [a.content.splitlines()[0] if a.role == "tool" and a.content else "" for a in answers]
    return "; ".join(f"{c.name}({c.arguments})" + (
        f" [refused: {said[i]}]" if i < len(said) and said[i].startswith("error:") else "")
        for i, c in enumerate(calls))


# -- MiniWoB's side ------------------------------------------------------------------------

async def _miniwob_ref(page: Any, path: tuple[int, ...]) -> int | None:
    """MiniWoB's ref for the element at ``path`` (``core.getDOMInfo`` numbers them)."""
    return await page.evaluate(
        "p => { core.getDOMInfo(); const e = (" + FIND + ")(p);"
        " return e && e.dataset.wob_ref !== undefined ? +e.dataset.wob_ref : null; }",
        list(path))


async def _apply(page: Any, call: Call) -> None:
    """One recorded call as MiniWoB's own primitives (see the module docstring)."""
    args = call.arguments
    ref = await _miniwob_ref(page, call.path) if call.path is not None else None
    if call.name in ("click", "type", "select") and ref is not None:
        await page.evaluate("r => core.elementClick(r)", ref)
    if call.name == "type":
        await page.keyboard.type(str(args.get("text", "")))
    elif call.name == "select" and call.path is not None:
        await page.evaluate(
            "([p, label]) => { const s = (" + FIND + ")(p);"
            " const o = [...s.options].find(o => o.label === label || o.text === label);"
            " if (o) { o.selected = true; s.dispatchEvent(new Event('input', {bubbles: true}));"
            " s.dispatchEvent(new Event('change', {bubbles: true})); } }",
            [list(call.path), str(args.get("option", ""))])
    elif call.name == "press":
        await page.keyboard.press(str(args.get("key", "")))
    elif call.name == "click_xy":
        await page.mouse.click(float(args["x"]), float(args["y"]))
    elif call.name == "drag":
        await page.mouse.move(float(args["x1"]), float(args["y1"]))
        await page.mouse.down()
        await page.mouse.move(float(args["x2"]), float(args["y2"]), steps=8)
        await page.mouse.up()
    elif call.name == "wait":
        await page.clock.run_for(int(float(args.get("seconds", 0)) * 1000))
    elif call.name == "scroll" and call.offset is not None:
        script = ("([p, y]) => { let b = (" + FIND + ")(p);"
                  " while (b && !(b.scrollHeight > b.clientHeight + 1 &&"
                  " /(auto|scroll)/.test(getComputedStyle(b).overflowY))) b = b.parentElement;"
                  " if (b) b.scrollTop = y; else window.scrollTo(0, y); }")
        await page.evaluate(script, [list(call.path or ()), call.offset])


async def miniwob_run(case: Case, calls: Sequence[Sequence[Call]], turn_ms: int, browser: Any
                      ) -> tuple[list[StepRecord], bool]:
    """The recorded calls on MiniWoB's own page, started and driven as MiniWoB does.

    Page time passes as the env's protocol lets it pass (``turn_ms`` per turn, plus what
    ``wait`` asks for, on a paused clock), so the two runs differ only in how they act, not
    in how fast the machine is (see the module docstring).
    """
    from agentgym.envs.miniwob.env import EPOCH_MS, HIDE_HUD

    context = await browser.new_context(viewport={"width": 320, "height": 320})
    try:
        page = await context.new_page()
        await page.clock.install(time=EPOCH_MS)
        await page.clock.pause_at(EPOCH_MS + 1000)
        await page.goto(task_page(case.task).as_uri(), wait_until="load")
        await page.add_style_tag(content=HIDE_HUD)  # as the env does; outside the task area
        await page.clock.run_for(100)
        await page.evaluate("s => { Math.seedrandom(s); core.setDataMode('train');"
                            " core.startEpisodeReal(); }", case.seed)
        for _ in range(100):  # MiniWoB's begin_task waits for WOB_TASK_READY the same way
            if await page.evaluate("() => WOB_TASK_READY"):
                break
            await page.clock.run_for(50)
        utterance = await page.evaluate(
            "() => { const u = core.getUtterance(); return typeof u === 'string' ? u"
            " : u.utterance; }")
        steps = [StepRecord("(reset)", f"{utterance} || {await page.evaluate(PAGE_STATE)}",
                            None, None, False, False)]
        success = False
        for step in calls:
            for call in step:
                if (await page.evaluate(READ))[0]:  # MiniWoB acts on no ended episode
                    break
                await _apply(page, call)
            done, raw, discounted = await page.evaluate(READ)
            if not done:
                await page.clock.run_for(turn_ms)
                done, raw, discounted = await page.evaluate(READ)
            state = await page.evaluate(PAGE_STATE)
            steps.append(StepRecord(_describe(step), state, float(raw) if done else None,
                                    float(discounted) if done else None, bool(done), False))
            if done:
                success = float(raw) >= 1.0
                break
        return steps, success
    finally:
        await context.close()


# -- both ----------------------------------------------------------------------------------

def cases(tasks: Sequence[str], per_task: int, seed: int) -> list[Case]:
    """``per_task`` random seeds of each task: the solver where the task has one, else random."""
    rng = random.Random(seed)
    return [Case(task, rng.randrange(2**31 - 1), "expert" if task in SOLVERS else "random")
            for task in tasks for _ in range(per_task)]


async def run(all_cases: Sequence[Case], concurrency: int | None = None) -> list[Comparison]:
    """Both sides of every case.

    The env side runs concurrently (default: the rollout default concurrency), then MiniWoB's
    side one case at a time (its page time does not depend on that; one page keeps it
    simple). A side that fails is recorded as a difference, never a lost run.
    """
    from playwright.async_api import async_playwright

    from agentgym.envs.web.shared import CHROMIUM, CHROMIUM_ARGS
    from agentgym.rollout import RolloutConfig

    limit = asyncio.Semaphore(concurrency or RolloutConfig().concurrency)

    async def one(case: Case) -> tuple[list[StepRecord], bool, list[list[Call]], int]:
        async with limit:
            return await env_run(case)

    # every episode finishes (and closes its page) even when another fails
    ours = await asyncio.gather(*(one(c) for c in all_cases), return_exceptions=True)
    out = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM,
                                                   args=list(CHROMIUM_ARGS), headless=True)
        try:
            for case, got in zip(all_cases, ours, strict=True):
                episode = f"seed {case.seed} [{case.policy}]"
                if isinstance(got, BaseException):  # the env side failed: a difference
                    out.append(compare(FAMILY, case.task, episode, [], [_failed(got)],
                                       reference_success=False, agentgym_success=False))
                    continue
                steps, ok, calls, turn_ms = got
                try:
                    ref, ref_ok = await miniwob_run(case, calls, turn_ms, browser)
                except Exception as exc:  # noqa: BLE001 - MiniWoB's side failed: a difference
                    ref, ref_ok = [_failed(exc)], False
                out.append(compare(FAMILY, case.task, episode, ref, steps,
                                   reference_success=ref_ok, agentgym_success=ok))
        finally:
            await browser.close()
    return out


def _failed(exc: BaseException) -> StepRecord:
    """A side that raised, as a step that cannot match the other side's."""
    return StepRecord("(error)", f"{type(exc).__name__}: {exc}", None, None, False, False)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the check, print a table per task, differences, a summary line."""
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.miniwob.fidelity",
        description="Play MiniWoB tasks through the agentgym env and replay the same calls on "
                    "MiniWoB's own page with its own primitives; compare step by step.")
    parser.add_argument("--tasks", nargs="*", default=None,
                        help="task names (default: the tasks with a solver)")
    parser.add_argument("--all-tasks", action="store_true",
                        help="every task of the package (random clicks where no solver)")
    parser.add_argument("--per-task", type=int, default=3, help="random seeds per task")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    args = parser.parse_args(argv)
    tasks = list(task_names()) if args.all_tasks else args.tasks or sorted(SOLVERS)
    start = time.perf_counter()
    comparisons = asyncio.run(run(cases(tasks, args.per_task, args.seed)))
    print(table(summarize(comparisons)))
    for c in comparisons:
        if not c.agree:
            errors = [f"{side} {s.observation}" for side, steps in
                      (("reference", c.reference), ("agentgym", c.agentgym))
                      for s in steps if s.action == "(error)"]
            refused = [f"agentgym step {i} {s.action}" for i, s in enumerate(c.agentgym)
                       if "[refused: " in s.action]  # calls the env did not carry out
            print(f"DIFFERS {c.task} {c.episode}: "
                  + "; ".join([*errors, *map(str, c.mismatches[:3]), *refused[:3]]))
    print(f"{summary_line(FAMILY, comparisons)} ({time.perf_counter() - start:.0f} s)")
    return 0 if all(c.agree for c in comparisons) else 1


if __name__ == "__main__":
    raise SystemExit(main())
