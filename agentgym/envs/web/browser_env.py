"""The web shop in a real browser: Playwright driving headless Chromium.

The observation is the page's accessibility snapshot with stable element refs
(:mod:`.snapshot`) under the page's URL. Tools: ``click(ref)``, ``type(ref, text)``,
``select(ref, option)``, ``go_back()``, ``scroll(direction)`` and ``finish()``. The state
key is the URL path plus a hash of the snapshot.

One Chromium process serves every episode of the event loop, each episode in its own
browser context (own cookies, own shop session), closed when the episode ends, even when
it errors or is cancelled (:mod:`.shared`). Agent mistakes are ``valid=False``
observations: an unknown ref, typing into something that is not a text box, a link that
leaves the shop (the env goes back), a page that does not load within ``action_timeout``
(loading is stopped, the agent stays where it was). A crashed browser or page raises
:class:`~.base.WebEnvError`: the rollout records an error trajectory.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal
from urllib.parse import parse_qs, urljoin, urlsplit

from agentgym.errors import ConfigError
from agentgym.tools import ToolBox, tool
from agentgym.types import Message, ToolCall

from .base import ActionError, Episode, PageFacts, WebShopBase, expert_intent
from .shared import BrowserTab
from .site import COOKIE
from .snapshot import EDITABLE, Element, find_element, stabilize


class _BrowserTurn:
    def __init__(self, env: WebShopEnv, episode: Episode) -> None:
        self.env, self.episode = env, episode

    def done(self) -> bool:
        assert self.env.site is not None
        return self.episode.finished or self.env.site.order(self.episode.sid) is not None


@tool(timeout=600)
async def click(ref: str, state: _BrowserTurn) -> str:
    """Click a link, button or other element of the page.

    Args:
        ref: The element's ref from the snapshot, e.g. "e5".
        state: The episode's turn, filled in by the ToolBox (hidden from the model).
    """
    if state.done():
        return "not run: the episode is over"
    env, element = state.env, state.env._element(ref)
    assert env.site is not None
    target = urljoin(env.page.url, element.url) if element.url else ""
    if target and not target.startswith(env.site.url + "/"):
        raise ActionError(f"{ref} ({element.name!r}) leads off the shop ({target}); only the "
                          "shop's own pages can be opened")
    # Links and (submit) buttons load a page: wait for that page, not the old one.
    loads = bool(target) or element.role == "button"
    await env._act(env._locator(element).click(timeout=env._ms), f"clicking {ref}", True,
                   expect_navigation=loads)
    return f"clicked {element.role} {element.name!r}"


@tool(name="type", timeout=600)
async def type_(ref: str, text: str, state: _BrowserTurn, submit: bool = False) -> str:
    """Type text into a text box (replacing what it holds).

    Args:
        ref: The text box's ref from the snapshot, e.g. "e3".
        text: The text to type.
        submit: Press Enter afterwards (submits a search box's form).
        state: The episode's turn, filled in by the ToolBox (hidden from the model).
    """
    if state.done():
        return "not run: the episode is over"
    env, element = state.env, state.env._element(ref)
    if element.role not in EDITABLE:
        raise ActionError(f"{ref} is a {element.role} ({element.name!r}), not a text box; type "
                          "works on textbox elements")
    locator = env._locator(element)
    await env._act(locator.fill(text, timeout=env._ms), f"typing into {ref}", False)
    if submit:
        await env._act(locator.press("Enter", timeout=env._ms), f"submitting {ref}", True,
                       expect_navigation=True)
    return f"typed {text!r} into {element.name!r}" + (" and pressed Enter" if submit else "")


@tool(timeout=600)
async def select(ref: str, option: str, state: _BrowserTurn) -> str:
    """Choose an option of a drop-down.

    Args:
        ref: The drop-down's (combobox) ref from the snapshot, e.g. "e9".
        option: The option's text, as the snapshot shows it.
        state: The episode's turn, filled in by the ToolBox (hidden from the model).
    """
    if state.done():
        return "not run: the episode is over"
    env, element = state.env, state.env._element(ref)
    if element.role not in ("combobox", "listbox"):
        raise ActionError(f"{ref} is a {element.role} ({element.name!r}), not a drop-down; "
                          "select works on combobox elements")
    if option not in element.options:
        raise ActionError(f"{ref} ({element.name!r}) has no option {option!r}; its options: "
                          f"{element.options}")
    await env._act(env._locator(element).select_option(label=option, timeout=env._ms),
                   f"selecting in {ref}", False)
    return f"selected {option!r} in {element.name!r}"


@tool(timeout=600)
async def go_back(state: _BrowserTurn) -> str:
    """Go back to the previous page."""
    if state.done():
        return "not run: the episode is over"
    env = state.env
    assert env.site is not None
    before = env.page.url
    await env._act(env.page.go_back(timeout=env._ms), "going back", False)
    if not env.page.url.startswith(env.site.url + "/"):  # the blank page before the shop
        await env._act(env.page.go_forward(timeout=env._ms), "going forward again", True)
    if env.page.url == before:
        raise ActionError("there is no previous page to go back to")
    await env._act(env.page.wait_for_load_state("domcontentloaded", timeout=env._ms),
                   "going back", True)
    return "went back"


@tool(timeout=600)
async def scroll(state: _BrowserTurn, direction: Literal["down", "up"] = "down") -> str:
    """Scroll the page by most of a screen (the snapshot always shows the whole page).

    Args:
        direction: "down" or "up".
        state: The episode's turn, filled in by the ToolBox (hidden from the model).
    """
    env = state.env
    step = int(env.viewport[1] * 0.8) * (1 if direction == "down" else -1)
    y = await env._act(env.page.evaluate(
        "d => { window.scrollBy(0, d); return [Math.round(window.scrollY), "
        "document.documentElement.scrollHeight]; }", step), "scrolling", False)
    return f"scrolled {direction}: now at {y[0]} px of a {y[1]} px page"


@tool
def finish(state: _BrowserTurn) -> str:
    """Stop shopping without placing an order (the episode ends with reward 0)."""
    state.episode.finished = True
    return "finished without an order"


class WebShopEnv(WebShopBase):
    """The shop in headless Chromium; see the module docstring and :class:`WebShopBase`.

    Args:
        split: ``"train"`` or ``"test"`` tasks.
        catalog_seed: Seed of the generated catalogue.
        catalog_size: Number of products.
        action_timeout: Seconds an action (and the page load it causes) may take before the
            page counts as hanging.
        viewport: Browser window size, for screenshots and scrolling.
    """

    mode = "browser"

    def __init__(self, split: Any = "train", catalog_seed: int = 0, catalog_size: int = 5000,
                 action_timeout: float = 10.0, viewport: tuple[int, int] = (1024, 768)) -> None:
        super().__init__(split, catalog_seed, catalog_size)
        if not isinstance(action_timeout, int | float) or action_timeout <= 0:
            raise ConfigError(f"action_timeout must be a positive number of seconds, got "
                              f"{action_timeout!r}")
        self.action_timeout = float(action_timeout)
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self._toolbox = ToolBox([click, type_, select, go_back, scroll, finish])
        self.tools = self._toolbox.specs
        self._tab = BrowserTab()
        self.elements: dict[str, Element] = {}
        self.snapshot = ""

    @property
    def _ms(self) -> float:
        return self.action_timeout * 1000

    @property
    def page(self) -> Any:
        """The episode's Playwright page (after ``reset``)."""
        if self._tab.page is None:
            raise RuntimeError("WebShopEnv.page is read before reset(); call "
                               "`await env.reset(seed=...)` first")
        return self._tab.page

    def how_to_act(self) -> str:
        """Browser-mode action instructions."""
        return ("The page is shown as an accessibility tree; elements you can use carry a ref "
                "such as [ref=e3]. Act with the tools click(ref), type(ref, text, submit), "
                "select(ref, option), go_back(), scroll(direction) and finish().")

    # -- the browser -----------------------------------------------------------------------
    async def _open(self, url: str) -> str:
        assert self.site is not None and self.episode is not None
        page = await self._tab.open(self.viewport, cookies=[
            {"name": COOKIE, "value": self.episode.sid, "url": self.site.url}])
        await self._act(page.goto(url, timeout=self._ms), "opening the shop", True)
        return await self._page_text()

    async def _act(self, operation: Any, what: str, navigates: bool,
                   expect_navigation: bool = False) -> Any:
        """Await a Playwright operation; hangs and failures become agent-facing errors.

        Args:
            operation: The (not yet awaited) Playwright coroutine.
            what: The action, for messages.
            navigates: The operation may change the page: wait for it to load, then check
                it is still the shop.
            expect_navigation: The operation loads a new page for sure (a link, a submit):
                wait for that page, however long the old one stays on screen.
        """
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        assert self.episode is not None and self.site is not None
        try:
            async with asyncio.timeout(self.action_timeout + 5):  # Playwright's own, plus slack
                if expect_navigation:
                    async with self.page.expect_navigation(wait_until="domcontentloaded",
                                                           timeout=self._ms):
                        result = await operation
                else:
                    result = await operation
                if navigates:
                    await self.page.wait_for_load_state("domcontentloaded", timeout=self._ms)
        except (PlaywrightTimeout, TimeoutError) as exc:
            if self._tab.broken:
                self.episode.fault = _crash(exc)
                raise ActionError("the browser stopped responding") from exc
            await self._stop_loading()
            raise ActionError(f"{what} did not finish within {self.action_timeout:g} s (the "
                              "page may be hanging); loading was stopped, you are still on "
                              f"{self._shown_url()}") from None
        except PlaywrightError as exc:
            if self._tab.broken:
                self.episode.fault = _crash(exc)
                raise ActionError("the browser crashed") from exc
            raise ActionError(f"{what} failed: {str(exc).splitlines()[0]}") from None
        if navigates and not self.page.url.startswith(self.site.url + "/"):
            left = self.page.url
            await self._return_to_shop()
            raise ActionError(f"that leads off the shop ({left}); only the shop's own pages "
                              "can be opened, so the browser went back")
        return result

    async def _stop_loading(self) -> None:
        try:
            cdp = await self.page.context.new_cdp_session(self.page)
            try:
                await cdp.send("Page.stopLoading")
            finally:
                await cdp.detach()
        except Exception:  # noqa: BLE001 - a best-effort stop; the next snapshot tells
            pass

    async def _return_to_shop(self) -> None:
        assert self.site is not None
        try:
            await self.page.go_back(timeout=self._ms)
        except Exception:  # noqa: BLE001 - going home below is the fallback
            pass
        if not self.page.url.startswith(self.site.url + "/"):
            await self.page.goto(self.site.url + "/", timeout=self._ms)

    def _shown_url(self) -> str:
        parts = urlsplit(self.page.url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def _element(self, ref: str) -> Element:
        return find_element(self.elements, ref, ActionError)

    def _locator(self, element: Element) -> Any:
        return self.page.locator(f"aria-ref={element.target}")

    async def _page_text(self) -> str:
        assert self.episode is not None
        if self._tab.broken:
            raise _fault(self.episode, "the browser crashed")
        try:
            raw = await self.page.locator("body").aria_snapshot(mode="ai", timeout=self._ms)
        except Exception as exc:
            if self._tab.broken:
                raise _fault(self.episode, f"the browser crashed: {_first_line(exc)}") from exc
            await self._stop_loading()  # a page that hangs: read what is there
            try:
                raw = await self.page.locator("body").aria_snapshot(mode="ai",
                                                                    timeout=self._ms)
            except Exception as again:
                raise _fault(self.episode, f"the page cannot be read: {_first_line(again)}"
                             ) from again
        self.snapshot, self.elements = stabilize(raw)
        self._set_key(self.page.url, self.snapshot)
        return f"Page: {self._shown_url()}\n{self.snapshot}"

    async def _run_turn(self, action: Message) -> tuple[list[Message], bool]:
        assert self.episode is not None
        if self._tab.broken:
            raise _fault(self.episode, "the browser crashed")
        outcome = await self._toolbox.run(action, state=_BrowserTurn(self, self.episode))
        return list(outcome.messages), outcome.valid

    async def render(self) -> bytes:
        """A PNG screenshot of the current page (the visible part)."""
        return await self.page.screenshot(type="png", timeout=self._ms)

    async def _release_client(self) -> None:
        await self._tab.release_context()

    async def _close(self) -> None:
        try:
            await super()._close()
        finally:
            await self._tab.release_browser()

    # -- the oracle ------------------------------------------------------------------------
    def facts(self) -> PageFacts:
        """What the expert reads off the current snapshot."""
        parts = urlsplit(self.page.url)
        query = parse_qs(parts.query).get("q", [""])[0]
        links = [e for e in self.elements.values() if e.role == "link"]
        results = tuple(e.url.split("/product/")[1].split("?")[0] for e in links
                        if e.url.startswith("/product/"))
        chosen = {e.name: e.value for e in self.elements.values() if e.role == "combobox"}
        return PageFacts(parts.path, query, results, any(e.name == "Next >" for e in links),
                         chosen)

    def expert_action(self, buy: tuple[str, dict[str, str]] | None = None) -> Message:
        """The oracle's next action (the ``scripted`` policy), as a tool call.

        Args:
            buy: ``(product_id, options)`` to buy instead of the task's goal.
        """
        assert self.site is not None
        intent = expert_intent(self.task, self.site.catalog, self._cart(), self.facts(), buy)

        def ref(role: str, test: Any) -> str:
            return next(e.ref for e in self.elements.values() if e.role == role and test(e))

        kind = intent[0]
        if kind == "search":
            box = next(e for e in self.elements.values() if e.name == "Search products")
            if box.value != intent[1]:
                return _call("type", ref=box.ref, text=intent[1])
            return _call("click", ref=ref("button", lambda e: e.name == "Search"))
        if kind == "choose":
            return _call("select", ref=ref("combobox", lambda e: e.name == intent[1]),
                         option=intent[2])
        tests = {
            "open": ("link", lambda e: e.url.startswith(f"/product/{intent[1]}")),
            "next": ("link", lambda e: e.name == "Next >"),
            "add": ("button", lambda e: e.name == "Add to cart"),
            "cart": ("link", lambda e: e.url == "/cart"),
            "remove": ("button", lambda e: e.name == f"Remove item {intent[-1]}"),
            "order": ("button", lambda e: e.name == "Place order"),
        }
        role, test = tests[kind]
        return _call("click", ref=ref(role, test))


def _first_line(exc: BaseException) -> str:
    """An error's first line: Playwright appends the browser's log and launch command."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _crash(exc: BaseException) -> Exception:
    """The fault an episode ends with when Chromium is gone (one line, no driver log)."""
    from .base import WebEnvError

    return WebEnvError(f"the browser crashed (Chromium is gone): {_first_line(exc)}")


def _fault(episode: Episode, what: str) -> Exception:
    from .base import WebEnvError

    episode.fault = None
    return WebEnvError(what)


def _call(name: str, **arguments: str) -> Message:
    return Message("assistant", "", tool_calls=(ToolCall("call_0", name, arguments),))
