"""The web shop as text: the same site over plain HTTP, with no browser.

Each page is rendered to text with its links, buttons and drop-down choices in brackets
(:mod:`.textview`). Actions are WebShop's, as text or as tool calls:

- ``search[red waterproof jacket]`` or ``search(query)``: search from any page;
- ``click[Add to cart]`` or ``click(element)``: follow a link, press a button, or pick a
  drop-down value (``click[m]``, or ``click[size: m]`` when a value is ambiguous);
- ``finish()``: end the episode without buying.

Clicking a label that is not on the page, or a link that leaves the shop, is a
``valid=False`` observation. Tasks, rewards and the expert are those of
:class:`~.base.WebShopBase`, so a purchase scores the same as in the browser env.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

from agentgym.tools import ToolBox, tool
from agentgym.types import Message, ToolCall

from .base import ActionError, Episode, PageFacts, WebShopBase, expert_intent
from .shared import shared
from .textview import Clickable, Page, parse_page

_BRACKET_RE = re.compile(r"\b(search|click)\[(.*?)\](?!.*\b(?:search|click)\[)", re.DOTALL)


class _TextTurn:
    def __init__(self, env: WebShopTextEnv, episode: Episode) -> None:
        self.env, self.episode = env, episode

    def done(self) -> bool:
        assert self.env.site is not None
        return self.episode.finished or self.env.site.order(self.episode.sid) is not None


@tool
async def search(query: str, state: _TextTurn) -> str:
    """Search the shop's products.

    Args:
        query: Words describing the product, e.g. "red waterproof jacket".
        state: The episode's turn, filled in by the ToolBox (hidden from the model).
    """
    if state.done():
        return "not run: the episode is over"
    if not query.strip():
        raise ActionError("the search query is empty; write the words to search for")
    await state.env._get(f"/search?{urlencode({'q': query.strip()})}")
    return f"searched for {query.strip()!r}"


@tool
async def click(element: str, state: _TextTurn) -> str:
    """Click a link or button, or pick a drop-down value, by its label in brackets.

    Args:
        element: The label shown in brackets, e.g. "Add to cart" or "size: m".
        state: The episode's turn, filled in by the ToolBox (hidden from the model).
    """
    if state.done():
        return "not run: the episode is over"
    return await state.env._click(element)


@tool
def finish(state: _TextTurn) -> str:
    """Stop shopping without placing an order (the episode ends with reward 0)."""
    state.episode.finished = True
    return "finished without an order"


class WebShopTextEnv(WebShopBase):
    """The shop as text pages over HTTP; see the module docstring and :class:`WebShopBase`.

    Example:
        >>> import asyncio
        >>> from agentgym.envs.web import WebShopTextEnv
        >>> async def buy():
        ...     async with WebShopTextEnv(catalog_size=500) as env:
        ...         await env.reset(seed=1)
        ...         while True:
        ...             result = await env.step(env.expert_action())
        ...             if result.done:
        ...                 return result.reward
        >>> asyncio.run(buy())
        1.0
    """

    mode = "text"

    def __init__(self, split: Any = "train", catalog_seed: int = 0, catalog_size: int = 5000,
                 ) -> None:
        super().__init__(split, catalog_seed, catalog_size)
        self._toolbox = ToolBox([search, click, finish])
        self.tools = self._toolbox.specs
        self._http: Any = None
        self.url = ""
        self.page = Page()

    def how_to_act(self) -> str:
        """Text-mode action instructions."""
        return ("Act with one action per reply: search[words] to search, click[label] to "
                "click a link or button or to pick a drop-down value shown in brackets "
                "(e.g. click[size: m]), or the tools search(query), click(element) and "
                "finish().")

    async def _open(self, url: str) -> str:
        if self._http is None:
            self._http = await shared().http.acquire("http")
        await self._get(url)
        return await self._page_text()

    async def _page_text(self) -> str:
        return f"Page: {self._shown_url()}\n{self.page.render()}"

    def _shown_url(self) -> str:
        parts = urlsplit(self.url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    async def _get(self, url: str, data: dict[str, str] | None = None) -> None:
        assert self.site is not None and self.episode is not None
        target = urljoin(self.url or self.site.url, url)
        headers = {"Cookie": f"shop_session={self.episode.sid}"}
        try:
            if data is None:
                response = await self._http.get(target, headers=headers)
            else:
                response = await self._http.post(target, data=data, headers=headers)
            async with response:
                html = await response.text()
                final = str(response.url)
        except Exception as exc:  # the local server is ours: failing to reach it is a fault
            self.episode.fault = exc
            raise ActionError(f"the shop did not answer: {exc}") from exc
        self.url, self.page = final, parse_page(html)
        self._set_key(final, self.page.render())

    async def _click(self, label: str) -> str:
        assert self.site is not None
        item: Clickable | None = self.page.find(label)
        if item is None:
            shown = ", ".join(f"[{c}]" for c in self.page.clickables)
            raise ActionError(f"no element labelled [{label.strip()}] on this page; "
                              f"clickable here: {shown}")
        if item.kind == "option":
            select = self.page.selects[item.select]
            self.page.forms[select.form].fields[select.name] = item.value
            self._set_key(self.url, self.page.render())
            return f"chose {select.kind} {item.value}"
        if item.kind == "link":
            target = urljoin(self.url, item.href)
            if urlsplit(target).netloc != urlsplit(self.site.url).netloc:
                raise ActionError(f"[{item.label}] leads off the shop ({target}); only the "
                                  "shop's own pages can be opened")
            await self._get(target)
            return f"opened [{item.label}]"
        form = self.page.forms[item.form]
        fields = dict(form.fields)
        if form.method == "get":
            await self._get(f"{form.action}?{urlencode(fields)}")
        else:
            await self._get(form.action, fields)
        return f"pressed [{item.label}]"

    async def _run_turn(self, action: Message) -> tuple[list[Message], bool]:
        assert self.episode is not None
        if not action.tool_calls:
            match = _BRACKET_RE.search(action.content)
            if match:  # WebShop's text actions: search[...] / click[...]
                name, arg = match.group(1), match.group(2)
                key = "query" if name == "search" else "element"
                action = Message("assistant", action.content,
                                 tool_calls=(ToolCall("call_0", name, {key: arg}),))
        outcome = await self._toolbox.run(action, state=_TextTurn(self, self.episode))
        return list(outcome.messages), outcome.valid

    async def _close(self) -> None:
        try:
            await super()._close()
        finally:
            http, self._http = self._http, None
            if http is not None:
                await shared().http.release("http", http)

    # -- the oracle ----------------------------------------------------------------------
    def facts(self) -> PageFacts:
        """What the expert reads off the current text page."""
        parts = urlsplit(self.url)
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        from urllib.parse import unquote_plus

        results = tuple(c.href.split("/product/")[1].split("?")[0]
                        for c in self.page.clickables.values()
                        if c.kind == "link" and c.href.startswith("/product/"))
        chosen = {s.kind: self.page.forms[s.form].fields.get(s.name, "")
                  for s in self.page.selects}
        return PageFacts(parts.path, unquote_plus(query.get("q", "")), results,
                         self.page.find("Next >") is not None, chosen)

    def expert_action(self, buy: tuple[str, dict[str, str]] | None = None) -> Message:
        """The oracle's next action (the ``scripted`` policy), as a tool call.

        Args:
            buy: ``(product_id, options)`` to buy instead of the task's goal.
        """
        assert self.site is not None
        intent = expert_intent(self.task, self.site.catalog, self._cart(), self.facts(), buy)
        kind = intent[0]
        if kind == "search":
            return _call("search", query=intent[1])
        label = {"next": "Next >", "add": "Add to cart", "order": "Place order"}.get(kind)
        if kind == "open":
            label = next(c.label for c in self.page.clickables.values()
                         if c.href.startswith(f"/product/{intent[1]}"))
        elif kind == "choose":
            label = f"{intent[1]}: {intent[2]}"
        elif kind == "cart":
            label = next(c.label for c in self.page.clickables.values()
                         if c.href == "/cart")
        elif kind == "remove":
            label = f"Remove item {intent[1]}"
        return _call("click", element=str(label))


def _call(name: str, **arguments: str) -> Message:
    return Message("assistant", "", tool_calls=(ToolCall("call_0", name, arguments),))
