"""Resources the web envs share within one event loop: the shop server, Chromium, HTTP.

An env takes a reference when it starts and gives it back in ``aclose``; the last one out
stops the server or closes the browser, so a rollout of many episodes runs one server and
one Chromium process (each episode in its own browser context), and nothing outlives the
envs. A test fixture that holds a reference keeps them up across tests. Resources belong to
the event loop that made them: Playwright and aiohttp objects cannot cross loops.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentgym.errors import MissingExtraError

if TYPE_CHECKING:  # imported where used: it loads aiohttp
    from .site import ShopSite

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
OWNER_ENV = "AGENTGYM_BROWSER_OWNER"
"""Set in every browser process we launch (to the launching pid), so leaks can be counted."""
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 # nothing but the local shop resolves: off-site links fail fast, never leak
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1")


@dataclass
class _Entry(Generic[T]):
    value: T
    refs: int = 0


@dataclass
class _Pool(Generic[T]):
    """Reference-counted values by key, made and closed by the given coroutines."""

    make: Callable[[Hashable], Awaitable[T]]
    close: Callable[[T], Awaitable[None]]
    alive: Callable[[T], bool] = lambda _: True
    entries: dict[Hashable, _Entry[T]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def acquire(self, key: Hashable) -> T:
        async with self.lock:
            entry = self.entries.get(key)
            if entry is not None and not self.alive(entry.value):  # e.g. a crashed browser
                del self.entries[key]
                await close_quietly(self.close(entry.value))
                entry = None
            if entry is None:
                entry = self.entries[key] = _Entry(await self.make(key))
            entry.refs += 1
            return entry.value

    async def release(self, key: Hashable, value: T) -> None:
        async with self.lock:
            entry = self.entries.get(key)
            if entry is None or entry.value is not value:  # replaced after a crash
                return
            entry.refs -= 1
            if entry.refs <= 0:
                del self.entries[key]
                await close_quietly(self.close(value))


async def close_quietly(closing: Awaitable[None]) -> None:
    """Closing is best effort: a dead browser or a closed socket is already released."""
    try:
        async with asyncio.timeout(15):
            await closing
    except Exception:  # noqa: BLE001 - teardown of something already broken
        pass


# -- the three kinds of resource -------------------------------------------------------------
async def _make_site(key: Hashable) -> ShopSite:
    from .search import search_index
    from .site import ShopSite

    seed, size = key  # type: ignore[misc]
    index = await asyncio.to_thread(search_index, seed, size)  # ~1 s once per process
    site = ShopSite(index)
    await site.start()
    return site


async def _close_site(site: ShopSite) -> None:
    await site.stop()


@dataclass
class BrowserHandle:
    """A running Chromium and the Playwright driver that owns it."""

    playwright: Any
    browser: Any


async def _make_browser(key: Hashable) -> BrowserHandle:
    try:
        from playwright.async_api import async_playwright
    except ImportError as exc:
        raise MissingExtraError("playwright", "web", "the browser web env") from exc
    if not os.path.exists(CHROMIUM):  # noqa: ASYNC240 - one stat before a launch
        raise FileNotFoundError(
            f"Chromium was expected at {CHROMIUM}; install it with `apt-get install -y "
            "chromium` (never `playwright install`, which downloads a browser)")
    playwright = await async_playwright().start()
    try:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True,
            env={**os.environ, OWNER_ENV: str(os.getpid())})
    except BaseException:
        await playwright.stop()
        raise
    return BrowserHandle(playwright, browser)


async def _close_browser(handle: BrowserHandle) -> None:
    try:
        await close_quietly(handle.browser.close())
    finally:
        await close_quietly(handle.playwright.stop())


async def _make_http(key: Hashable) -> Any:
    import aiohttp

    # Cookies travel in each request's header: one shared client serves many sessions.
    return aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                 timeout=aiohttp.ClientTimeout(total=30))


async def _close_http(session: Any) -> None:
    await session.close()


@dataclass
class _LoopShared:
    sites: _Pool[ShopSite] = field(default_factory=lambda: _Pool(_make_site, _close_site))
    browsers: _Pool[BrowserHandle] = field(default_factory=lambda: _Pool(
        _make_browser, _close_browser, lambda h: h.browser.is_connected()))
    http: _Pool[Any] = field(default_factory=lambda: _Pool(_make_http, _close_http,
                                                           lambda s: not s.closed))


_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopShared] = (
    weakref.WeakKeyDictionary())


def shared() -> _LoopShared:
    """The running loop's shared resources."""
    loop = asyncio.get_running_loop()
    found = _BY_LOOP.get(loop)
    if found is None:
        found = _BY_LOOP[loop] = _LoopShared()
    return found


Guard = Callable[[Awaitable[Any], str], Awaitable[Any]]
"""Awaits one browser operation described by a phrase ("opening a page"), e.g. under a timeout."""


async def _await(operation: Awaitable[Any], what: str) -> Any:
    return await operation


class BrowserTab:
    """One env's share of the loop's Chromium: a reference on it, and the episode's page.

    Each episode opens a fresh browser context with one page (:meth:`open`) and gives it back
    when it ends (:meth:`release_context`); the browser reference is held from the first
    episode until :meth:`close`, and traded for a fresh browser when the old one crashed.

    Attributes:
        handle: The shared browser, from the first :meth:`open` until :meth:`close`.
        context: The episode's browser context (None between episodes).
        page: The episode's page (None between episodes).
    """

    def __init__(self) -> None:
        self.handle: BrowserHandle | None = None
        self.context: Any = None
        self.page: Any = None
        self._crashed = False

    @property
    def broken(self) -> bool:
        """Whether the browser or the page is gone (crashed, disconnected, closed, unopened)."""
        handle = self.handle
        return (self._crashed or handle is None or not handle.browser.is_connected()
                or self.page is None or self.page.is_closed())

    async def open(self, viewport: tuple[int, int],
                   cookies: Sequence[Mapping[str, str]] = (), guard: Guard = _await) -> Any:
        """A fresh context and page for an episode; returns the page.

        Args:
            viewport: The window's ``(width, height)``.
            cookies: Set in the context before the page opens.
            guard: Awaits each operation on the browser (default: as it is).
        """
        pool = shared().browsers
        if self.handle is not None and not self.handle.browser.is_connected():
            old, self.handle = self.handle, None
            await pool.release("chromium", old)
        if self.handle is None:
            self.handle = await pool.acquire("chromium")
        self._crashed = False
        self.context = await guard(self.handle.browser.new_context(
            viewport={"width": viewport[0], "height": viewport[1]}), "opening")
        if cookies:
            await guard(self.context.add_cookies(list(cookies)), "setting the cookies")
        page = self.page = await guard(self.context.new_page(), "opening a page")
        page.on("crash", self._on_crash)
        return page

    async def release_context(self) -> None:
        """Close the episode's context (idempotent; best effort on a crashed browser)."""
        context, self.context, self.page = self.context, None, None
        if context is not None:  # a crashed browser has no context left to close
            await close_quietly(context.close())

    async def close(self) -> None:
        """Close the context and give the browser reference back (idempotent)."""
        try:
            await self.release_context()
        finally:
            await self.release_browser()

    async def release_browser(self) -> None:
        """Give the browser reference back (idempotent); the last one out closes Chromium."""
        handle, self.handle = self.handle, None
        if handle is not None:
            await shared().browsers.release("chromium", handle)

    def _on_crash(self, *_: Any) -> None:
        self._crashed = True


def browser_processes(owner: int | None = None) -> list[int]:
    """Pids of live browser processes launched by process ``owner`` (default: this one).

    A process counts when its environment carries the marker every launch sets (so orphans
    count too) or when it descends from one that does (Chromium's utility processes start
    with a cleaned environment).
    """
    marker = f"{OWNER_ENV}={os.getpid() if owner is None else owner}".encode()
    parents: dict[int, int] = {}
    marked: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":  # exited, waiting to be reaped: not running
                continue
            parents[int(name)] = int(fields[1])
            with open(f"/proc/{name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    marked.add(int(name))
        except (OSError, IndexError, ValueError):
            continue

    def launched(pid: int) -> bool:
        for _ in range(64):  # walk up the tree; bounded against odd /proc states
            if pid in marked:
                return True
            if pid not in parents or pid <= 1:
                return False
            pid = parents[pid]
        return False

    return sorted(pid for pid in parents if launched(pid))
