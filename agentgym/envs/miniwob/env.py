"""MiniWoB++ tasks in real Chromium, on the ``miniwob`` package's own pages.

One env plays one task (``task="click-button"``, any of :func:`.tasks.task_names`). An
episode opens the task's page from the installed package in its own browser context of the
process-wide Chromium (:mod:`agentgym.envs.web.shared`), seeds MiniWoB's generator with
``Math.seedrandom(seed)`` and starts the episode with ``core.startEpisodeReal()``, exactly
as MiniWoB's own Python side does. The utterance is the task prompt; the page is shown as an
accessibility snapshot with stable refs (:mod:`.snapshot`); the tools are in :mod:`.tools`.

**Reward and done come from the page.** MiniWoB's reward functions call
``core.endEpisode``, which sets ``WOB_DONE_GLOBAL``, ``WOB_RAW_REWARD_GLOBAL`` (in [-1, 1])
and ``WOB_REWARD_GLOBAL`` (the raw reward discounted by the time used). The step reward is
the raw reward (``reward="discounted"`` picks the other); ``info`` carries both, MiniWoB's
reason, and ``success`` (raw reward 1: the task fully done, MiniWoB's own
``get_thresholded_reward`` at its default threshold; partial credit is not success). Until the
page ends the episode, steps are unscored (``None``).

**Time is the page's own.** MiniWoB sets each task's limit (``core.EPISODE_MAX_TIME``,
10 s for most); running out ends the episode with raw reward -1. The page clock is a
Playwright fake clock that stands still while the policy thinks and moves ``turn_ms`` per
agent turn (plus what ``wait`` asks for), so an episode is a function of seed and actions,
whatever the machine's load or the model's speed, and the limit means "this many turns".

Faults: a crashed browser, a closed page or a page that stops answering raises
:class:`MiniWoBError`, which the rollout records as an error trajectory.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import weakref
from collections.abc import Mapping
from typing import Any, Literal

from agentgym.env import BaseEnv
from agentgym.envs.web.shared import BrowserTab
from agentgym.envs.web.snapshot import find_element
from agentgym.errors import ConfigError
from agentgym.tools import ToolBox
from agentgym.types import Message, StepResult

from .errors import ActionError, MiniWoBError
from .snapshot import Element, stabilize
from .tasks import package_version, task_page
from .tools import TOOLS, Turn

EPOCH_MS = 1_736_942_400_000
"""The page clock's start (2025-01-15 12:00 UTC): date tasks see the same "today" always."""
HIDE_HUD = "#reward-display { display: none !important; }"
"""MiniWoB's reward/timer display is for humans watching; it is not part of the task."""
HANG_S = 60.0
"""Seconds past ``action_timeout`` after which an operation counts as a hung page: generous,
so that a heavily loaded machine slows episodes down instead of failing them."""
OPENING = 8
"""Episodes (of one event loop) that open their page at once; the others queue, and the queue
does not count against the hang limit: 64 episodes opening together on a busy machine (the
rollout default) made single operations take past ``HANG_S`` and end as errors."""
_OPENING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary())
READ_STATE = ("() => [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_GLOBAL, "
              "WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON)]")

INTRO = """\
You are using a small web page to do a task. Task: {utterance}

The page is shown as an accessibility tree; each element carries a ref such as [ref=e3]. \
Act with the tools: click(ref), type(ref, text), select(ref, option), press(key), \
scroll(direction, ref), click_xy(x, y), drag(x1, y1, x2, y2) and wait(seconds). You may \
call several tools in one turn. The page ends the episode when the task is done (or \
failed). You have {limit:g} s of page time and each turn takes {turn:g} s.

{page}"""


def _opening() -> asyncio.Semaphore:
    """The running loop's bound on episodes opening their page at once (see ``OPENING``)."""
    loop = asyncio.get_running_loop()
    found = _OPENING.get(loop)
    if found is None:
        found = _OPENING[loop] = asyncio.Semaphore(OPENING)
    return found


class MiniWoBEnv(BaseEnv):
    """One MiniWoB++ task in headless Chromium; see the module docstring.

    Args:
        task: The task's name, e.g. ``"click-button"`` (``python -m agentgym.envs.miniwob``
            lists them).
        turn_ms: Page time one agent turn takes, in milliseconds.
        reward: ``"raw"`` (MiniWoB's raw reward) or ``"discounted"`` (scaled by time left).
        screenshot: Put a PNG screenshot (a ``data:`` URL) into every reset/step info under
            ``"screenshot"``, for multimodal policies.
        action_timeout: Seconds Playwright waits for an element to be actionable before the
            action fails (an agent mistake); a page silent for ``HANG_S`` longer is a fault.
        viewport: Browser window size; MiniWoB draws its task in the top-left 160x210 px.
    """

    def __init__(self, task: str = "click-button", turn_ms: int = 500,
                 reward: Literal["raw", "discounted"] = "raw", screenshot: bool = False,
                 action_timeout: float = 5.0, viewport: tuple[int, int] = (320, 320)) -> None:
        super().__init__()
        self.page_path = task_page(task)  # raises ConfigError with a did-you-mean
        if not isinstance(turn_ms, int) or not 10 <= turn_ms <= 60_000:
            raise ConfigError(f"turn_ms must be an int in [10, 60000] (ms), got {turn_ms!r}")
        if reward not in ("raw", "discounted"):
            raise ConfigError(f"reward must be 'raw' or 'discounted', got {reward!r}")
        if not isinstance(action_timeout, int | float) or action_timeout <= 0:
            raise ConfigError(f"action_timeout must be a positive number of seconds, got "
                              f"{action_timeout!r}")
        self.task, self.turn_ms, self.reward_kind = task, turn_ms, reward
        self.screenshot, self.action_timeout = bool(screenshot), float(action_timeout)
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self._toolbox = ToolBox(TOOLS)
        self.tools = self._toolbox.specs
        self._tab = BrowserTab()
        self.fault: BaseException | None = None
        """An infrastructure fault met while running a tool (raised after the turn)."""
        self.elements: dict[str, Element] = {}
        self.snapshot = ""
        self.utterance = ""
        self.time_limit_ms = 0
        self.elapsed_ms = 0
        self.seed: int | None = None

    # -- what the tools use --------------------------------------------------------------
    @property
    def page(self) -> Any:
        """The episode's Playwright page (after ``reset``)."""
        if self._tab.page is None:
            raise RuntimeError("MiniWoBEnv.page is read before reset(); call "
                               "`await env.reset(seed=...)` first")
        return self._tab.page

    @property
    def timeout_ms(self) -> float:
        """Playwright's wait for an element, in milliseconds."""
        return self.action_timeout * 1000

    @property
    def hang_ms(self) -> float:
        """The hang limit in milliseconds: past it a page counts as not answering."""
        return (self.action_timeout + HANG_S) * 1000

    def element(self, ref: str) -> Element:
        """The element a ref names, or an :class:`ActionError` listing the refs there are."""
        return find_element(self.elements, ref, ActionError)

    def locator(self, element: Element) -> Any:
        """A Playwright locator for an element of the current snapshot."""
        return self.page.locator(f"aria-ref={element.target}")

    async def act(self, operation: Any, what: str) -> Any:
        """Await a Playwright operation; failures become agent-facing errors, hangs faults.

        Args:
            operation: The (not yet awaited) Playwright coroutine.
            what: The action, for messages.
        """
        from playwright.async_api import Error as PlaywrightError

        try:
            async with asyncio.timeout(self.action_timeout + HANG_S):
                return await operation
        except TimeoutError as exc:  # Playwright's own timeout would have fired: a hang
            self.fault = exc
            raise ActionError(f"the page stopped answering while {what}") from exc
        except PlaywrightError as exc:
            if self._tab.broken or not await self._answers():
                self.fault = exc
                raise ActionError("the browser crashed") from exc
            raise ActionError(f"{what} failed: {str(exc).splitlines()[0]}") from None

    async def advance(self, ms: int) -> None:
        """Let ``ms`` of page time pass (timers, animations, MiniWoB's countdown)."""
        await self._guard(self.page.clock.run_for(ms), "advancing the page clock")
        self.elapsed_ms += ms

    # -- the browser ---------------------------------------------------------------------
    async def _answers(self) -> bool:
        try:
            async with asyncio.timeout(max(5.0, 3 * self.action_timeout)):
                await self.page.evaluate("1")
            return True
        except Exception:  # noqa: BLE001 - any failure to answer means the page is gone
            return False

    async def _guard(self, operation: Any, what: str) -> Any:
        """Await an operation the env itself runs: every failure is an infrastructure fault."""
        try:
            async with asyncio.timeout(self.action_timeout + HANG_S):
                return await operation
        except Exception as exc:
            state = "crashed" if self._tab.broken else "stopped answering"
            raise MiniWoBError(f"miniwob/{self.task}: the page {state} while {what}: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                               ) from exc

    async def _open(self, seed: int) -> None:
        page = await self._tab.open(self.viewport, guard=self._guard)
        await self._guard(page.clock.install(time=EPOCH_MS), "installing the clock")
        await self._guard(page.clock.pause_at(EPOCH_MS + 1000), "pausing the clock")
        # Playwright's own 30 s default would fail a load that a busy machine only slows
        await self._guard(page.goto(self.page_path.as_uri(), wait_until="load",
                                    timeout=(self.action_timeout + HANG_S) * 1000),
                          f"loading {self.page_path.name}")
        await self._guard(page.add_style_tag(content=HIDE_HUD), "hiding the HUD")
        await self._guard(page.clock.run_for(100), "letting the page settle")
        # MiniWoB's own reset: seed its generator, then start the episode.
        await self._guard(page.evaluate(
            "s => { Math.seedrandom(s); core.startEpisodeReal(); }", seed), "starting")
        self.elapsed_ms = 0
        for _ in range(100):  # some tasks build their page over a few timer ticks
            if await self._guard(page.evaluate("() => WOB_TASK_READY"), "waiting for ready"):
                break
            await self.advance(50)
        else:
            raise MiniWoBError(f"miniwob/{self.task} did not become ready in 5 s of page time")
        self.utterance, limit = await self._guard(page.evaluate(
            "() => { const u = core.getUtterance(); "
            "return [typeof u === 'string' ? u : u.utterance, core.EPISODE_MAX_TIME]; }"),
            "reading the utterance")
        self.time_limit_ms = int(limit)

    async def _read(self) -> str:
        """Snapshot the page: sets ``elements`` and ``snapshot``, returns the text."""
        if self._tab.broken:
            raise MiniWoBError(f"miniwob/{self.task}: the browser crashed")
        raw = await self._guard(self.page.locator("body").aria_snapshot(
            mode="ai", timeout=(self.action_timeout + HANG_S) * 1000), "reading the page")
        self.snapshot, self.elements = stabilize(raw)
        return self.snapshot

    async def render(self) -> bytes:
        """A PNG screenshot of the page (the task is drawn in its top-left 160x210 px)."""
        return await self._guard(self.page.screenshot(type="png"), "taking a screenshot")

    async def _shot_info(self) -> dict[str, Any]:
        if not self.screenshot:
            return {}
        png = await self.render()
        return {"screenshot": "data:image/png;base64," + base64.b64encode(png).decode()}

    # -- BaseEnv -------------------------------------------------------------------------
    def state_key(self) -> str | None:
        """The task plus a hash of the page as the agent sees it (values, checks, text)."""
        if not self.snapshot:
            return None
        digest = hashlib.sha1(self.snapshot.encode("utf-8", "replace")).hexdigest()[:12]
        return f"{self.task}#{digest}"

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[list[Message], dict[str, Any]]:
        if options:
            raise ValueError(f"MiniWoB envs take no reset options, got {sorted(options)}; "
                             "the task is chosen with make(..., task=NAME)")
        await self._tab.release_context()
        self.seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
        self.snapshot, self.fault = "", None
        async with _opening():
            await self._open(self.seed)
            page = await self._read()
        prompt = INTRO.format(utterance=self.utterance, limit=self.time_limit_ms / 1000,
                              turn=self.turn_ms / 1000, page=page)
        info = {"task_id": f"miniwob/{self.task}/{self.seed}", "task": self.task,
                "seed": self.seed, "utterance": self.utterance,
                "time_limit_ms": self.time_limit_ms, "miniwob_version": package_version(),
                **await self._shot_info()}
        return [Message("user", prompt)], info

    async def _step(self, action: Message) -> StepResult:
        if self._tab.broken:
            raise MiniWoBError(f"miniwob/{self.task}: the browser crashed")
        outcome = await self._toolbox.run(action, state=Turn(self))
        if self.fault is not None:
            fault, self.fault = self.fault, None
            raise MiniWoBError(f"miniwob/{self.task}: {fault!r}") from fault
        done, raw, discounted, reason = await self._guard(self.page.evaluate(READ_STATE),
                                                          "reading the reward")
        if not done:  # the turn's page time passes (this is when time can run out)
            await self.advance(self.turn_ms)
            done, raw, discounted, reason = await self._guard(self.page.evaluate(READ_STATE),
                                                              "reading the reward")
        messages = list(outcome.messages)
        info: dict[str, Any] = {"valid": outcome.valid, "elapsed_ms": self.elapsed_ms,
                                **await self._shot_info()}
        page = await self._read()
        if not done:
            messages.append(Message("user", page))
            return StepResult(tuple(messages), None, info=info)
        raw, discounted = float(raw), float(discounted)
        info.update(raw_reward=raw, env_reward=discounted, reason=reason, success=raw >= 1.0)
        ending = "timed out" if reason == "timed out" else f"raw reward {raw:g}"
        messages.append(Message("user", f"The episode is over ({ending}).\n{page}"))
        reward = raw if self.reward_kind == "raw" else discounted
        return StepResult(tuple(messages), reward, terminated=True, info=info)

    async def _close(self) -> None:
        await self._tab.close()

    # -- the expert ----------------------------------------------------------------------
    async def expert_action(self) -> Message:
        """The scripted solver's next action (``--policy expert``), for the tasks that have one.

        Raises:
            ConfigError: This task has no scripted solver (see :data:`.experts.SOLVERS`).
        """
        from .experts import next_action

        return await next_action(self)
