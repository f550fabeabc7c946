"""What the browser and text web envs share: tasks, the shop session, scoring, the expert.

An episode opens its own shopper session on the shared shop server; the purchase is read
back from the server, so both modes score the same order the same way (:mod:`.tasks`).
The episode ends (``terminated``) when an order is placed or the agent calls ``finish``;
steps before that are not scored (reward ``None``). Infrastructure faults (a crashed
browser, a dead server) raise :class:`WebEnvError`, which the rollout engine records as an
error trajectory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from agentgym.env import BaseEnv
from agentgym.errors import AgentGymError, ConfigError
from agentgym.types import Message, StepResult

from .catalog import Catalog
from .shared import shared
from .site import ShopSite
from .tasks import SPLITS, Task, make_task, order_reward


class WebEnvError(AgentGymError, RuntimeError):
    """An infrastructure fault of a web env (browser crashed, shop server gone)."""


class ActionError(ValueError):
    """An agent mistake in a web action; the ToolBox turns it into a ``valid=False`` reply."""


@dataclass
class Episode:
    """Per-episode state the tools act on."""

    sid: str
    task: Task
    finished: bool = False
    fault: BaseException | None = None
    """An infrastructure fault met while running a tool (re-raised after the turn)."""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PageFacts:
    """What the expert reads off the current page (either mode)."""

    path: str
    query: str = ""
    results: tuple[str, ...] = ()
    has_next: bool = False
    chosen: Mapping[str, str] = field(default_factory=dict)


Intent = tuple[str, ...]
"""("search", q) | ("open", pid) | ("next",) | ("choose", kind, value) | ("add",) |
("cart",) | ("remove", n) | ("order",)."""


def expert_intent(task: Task, catalog: Catalog, cart: Sequence[tuple[str, Mapping[str, str]]],
                  facts: PageFacts, buy: tuple[str, Mapping[str, str]] | None = None) -> Intent:
    """The oracle's next move: buy the goal product with the task's options, nothing else.

    ``buy=(product_id, options)`` buys that item instead (to compare what other purchases
    score).
    """
    goal = catalog.get(buy[0] if buy else task.goal_id)
    if goal is None:
        raise ValueError(f"no product {buy[0] if buy else task.goal_id!r} in the catalogue")
    options = dict(buy[1]) if buy else dict(task.options)
    wanted = (goal.id, options)
    on_cart = facts.path == "/cart"
    if cart:
        if [(p, dict(o)) for p, o in cart] == [wanted]:
            return ("order",) if on_cart else ("cart",)
        if not on_cart:
            return ("cart",)
        bad = next(i for i, line in enumerate(cart, 1) if (line[0], dict(line[1])) != wanted)
        return ("remove", str(bad))
    if facts.path == f"/product/{goal.id}":
        for kind, value in options.items():
            if facts.chosen.get(kind) != value:
                return ("choose", kind, value)
        return ("add",)
    if facts.path == "/search" and facts.query == goal.title:
        if goal.id in facts.results:
            return ("open", goal.id)
        if facts.has_next:
            return ("next",)
    return ("search", goal.title)


INTRO = """\
You are shopping on a web store. Your task: {instruction}

Find a product that matches, choose its options, add it to the cart and place the order. \
Placing the order ends the episode and scores it: full reward needs the right product type, \
every requested feature and option, and a price under the limit. Call finish() to give up \
without buying."""


class WebShopBase(BaseEnv):
    """Common part of :class:`~.text_env.WebShopTextEnv` and :class:`~.browser_env.WebShopEnv`.

    Args:
        split: ``"train"`` or ``"test"`` tasks (disjoint goal products).
        catalog_seed: Seed of the generated catalogue.
        catalog_size: Number of products in it.
    """

    mode: Literal["text", "browser"] = "text"

    def __init__(self, split: Literal["train", "test"] = "train", catalog_seed: int = 0,
                 catalog_size: int = 5000) -> None:
        super().__init__()
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        if not isinstance(catalog_size, int) or not 50 <= catalog_size <= 200_000:
            raise ConfigError(f"catalog_size must be an int in [50, 200000], got "
                              f"{catalog_size!r}")
        self.split, self.catalog_seed, self.catalog_size = split, catalog_seed, catalog_size
        self.site: ShopSite | None = None
        self.episode: Episode | None = None
        self._page_key = ""

    # -- mode-specific -------------------------------------------------------------------
    async def _open(self, url: str) -> str:
        """Open ``url`` in a fresh per-episode client; returns the page text."""
        raise NotImplementedError

    async def _run_turn(self, action: Message) -> tuple[list[Message], bool]:
        """Run the action's tool calls; returns (tool messages, valid)."""
        raise NotImplementedError

    async def _page_text(self) -> str:
        raise NotImplementedError

    async def _release_client(self) -> None:
        """Close the per-episode client (browser context, ...); idempotent."""

    # -- BaseEnv -------------------------------------------------------------------------
    def state_key(self) -> str | None:
        """URL path + a hash of the page as the agent sees it."""
        return self._page_key or None

    def _set_key(self, url: str, text: str) -> None:
        digest = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:12]
        self._page_key = f"{urlsplit(url).path}#{digest}"

    @property
    def task(self) -> Task:
        """The current task (after ``reset``)."""
        if self.episode is None:
            raise RuntimeError(f"{type(self).__name__}.task is read before reset(); call "
                               "`await env.reset(seed=...)` first")
        return self.episode.task

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[list[Message], dict[str, Any]]:
        if options:
            raise ValueError(f"the web envs take no reset options, got {sorted(options)}")
        if self.site is None:
            self.site = await shared().sites.acquire((self.catalog_seed, self.catalog_size))
        await self._end_episode()
        task_seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
        task = make_task(self.site.catalog, self.split, task_seed)
        self.episode = Episode(self.site.new_session(), task)
        try:
            page = await self._open(self.site.url + "/")
        except ActionError as exc:  # no agent acted yet: failing to load is the machine's fault
            raise WebEnvError(f"could not open the shop at {self.site.url}: {exc}") from exc
        prompt = f"{INTRO.format(instruction=task.instruction)}\n\n{self.how_to_act()}\n\n{page}"
        return [Message("user", prompt)], {"task_id": task.id, "task": task.to_dict()}

    def how_to_act(self) -> str:
        """The mode's action instructions (part of the first prompt)."""
        raise NotImplementedError

    async def _step(self, action: Message) -> StepResult:
        assert self.episode is not None and self.site is not None
        episode = self.episode
        messages, valid = await self._run_turn(action)
        if episode.fault is not None:
            fault, episode.fault = episode.fault, None
            raise WebEnvError(f"the {self.mode} web env failed: {fault}") from fault
        order = self.site.order(episode.sid)
        info: dict[str, Any] = {"valid": valid}
        if order is not None or episode.finished:
            reward = order_reward(episode.task, order or [])
            page = await self._page_text()
            info.update(success=reward >= 1.0, purchased=[p.id for p, _ in order or []])
            messages.append(Message("user", page))
            return StepResult(tuple(messages), reward, terminated=True, info=info)
        messages.append(Message("user", await self._page_text()))
        return StepResult(tuple(messages), None, info=info)

    def _cart(self) -> list[tuple[str, dict[str, str]]]:
        assert self.site is not None and self.episode is not None
        session = self.site.sessions.get(self.episode.sid)
        return [] if session is None else [(c.product_id, c.options) for c in session.cart]

    async def _end_episode(self) -> None:
        try:
            await self._release_client()
        finally:
            if self.episode is not None and self.site is not None:
                self.site.end_session(self.episode.sid)

    async def _close(self) -> None:
        try:
            await self._end_episode()
        finally:
            site, self.site = self.site, None
            if site is not None:
                await shared().sites.release((self.catalog_seed, self.catalog_size), site)
