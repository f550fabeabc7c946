"""The shop website: an aiohttp app over a generated catalogue, served on 127.0.0.1.

Pages (plain HTML forms and links, so a browser and a text client drive the same site):

- ``GET /``                    home page with the search box (in the header of every page)
- ``GET /search?q=..&page=N``  BM25-ranked results, ten a page, with ``< Prev``/``Next >``
- ``GET /product/{id}``        product page: price, features, one drop-down per option kind,
                               ``Add to cart`` (``?error=kind`` names a missing choice)
- ``POST /cart/add``           add the product with its chosen options, then show the cart
- ``GET /cart``                cart with ``Remove`` buttons and ``Place order``
- ``POST /cart/remove``        drop one cart line
- ``POST /checkout``           place the order (the episode's purchase), then ``GET /order``

Every page's footer links to an external policies page: following it leaves the site,
which the envs refuse. Sessions are isolated by a ``shop_session`` cookie: an env opens
one with :meth:`ShopSite.new_session` and reads the order back with :meth:`ShopSite.order`,
so many episodes share one server safely.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from .catalog import Catalog, Product
from .search import SearchIndex

COOKIE = "shop_session"
PER_PAGE = 10
MAX_RESULTS = 100
POLICIES_URL = "https://policies.example.com/shop"


@dataclass
class CartLine:
    """One cart line: a product and the options chosen for it."""

    product_id: str
    options: dict[str, str]


@dataclass
class ShopSession:
    """One shopper's state on the server."""

    id: str
    cart: list[CartLine] = field(default_factory=list)
    order: tuple[CartLine, ...] | None = None


# Typed request storage where aiohttp has it (3.12+), a plain key before.
SESSION: Any = web.RequestKey("session", ShopSession) if hasattr(web, "RequestKey") else "session"


class ShopSite:
    """The shop app and its server.

    Args:
        index: Search index over the catalogue the shop sells.
        extra_routes: More ``(method, path, handler)`` routes (tests add slow pages).
    """

    def __init__(self, index: SearchIndex,
                 extra_routes: tuple[tuple[str, str, object], ...] = ()) -> None:
        self.index = index
        self.catalog: Catalog = index.catalog
        self.sessions: dict[str, ShopSession] = {}
        self.app = web.Application(middlewares=[self._session_middleware])
        self.app.add_routes([
            web.get("/", self._home), web.get("/search", self._search),
            web.get("/product/{pid}", self._product), web.post("/cart/add", self._cart_add),
            web.get("/cart", self._cart), web.post("/cart/remove", self._cart_remove),
            web.post("/checkout", self._checkout), web.get("/order", self._order),
        ])
        for method, path, handler in extra_routes:
            self.app.router.add_route(method, path, handler)  # type: ignore[arg-type]
        self._runner: web.AppRunner | None = None
        self.url = ""
        """Base URL, ``http://127.0.0.1:PORT``, once started."""

    async def start(self) -> str:
        """Serve on a free port of 127.0.0.1; returns the base URL."""
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- sessions (used by the envs, in process) -------------------------------------------
    def new_session(self) -> str:
        """Open an empty shopper session; returns its cookie value."""
        sid = secrets.token_hex(8)
        self.sessions[sid] = ShopSession(sid)
        return sid

    def end_session(self, sid: str) -> None:
        """Forget a session (idempotent)."""
        self.sessions.pop(sid, None)

    def order(self, sid: str) -> list[tuple[Product, dict[str, str]]] | None:
        """The placed order of a session as (product, options) pairs; None before checkout."""
        session = self.sessions.get(sid)
        if session is None or session.order is None:
            return None
        return [(self._get(line.product_id), dict(line.options)) for line in session.order]

    def _get(self, pid: str) -> Product:
        product = self.catalog.get(pid)
        if product is None:
            raise web.HTTPNotFound(text=f"no product {pid}")
        return product

    @web.middleware
    async def _session_middleware(self, request: web.Request, handler: object,
                                  ) -> web.StreamResponse:
        sid = request.cookies.get(COOKIE, "")
        fresh = sid not in self.sessions
        if fresh:  # a visitor without a session (a person with a browser) gets one
            sid = self.new_session()
        request[SESSION] = self.sessions[sid]
        response: web.StreamResponse = await handler(request)  # type: ignore[operator]
        if fresh:
            response.set_cookie(COOKIE, sid, httponly=True, samesite="Lax")
        return response

    # -- pages -----------------------------------------------------------------------------
    def _page(self, request: web.Request, title: str, body: str, status: int = 200,
              query: str = "") -> web.Response:
        count = len(request[SESSION].cart)
        html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)} - Shop</title></head>
<body><header><nav><a href="/">Home</a> <a href="/cart">Cart ({count})</a></nav>
<form action="/search" method="get" role="search">
<input type="text" name="q" aria-label="Search products" value="{escape(query)}">
<button type="submit">Search</button></form></header>
<main>{body}</main>
<footer><a href="{POLICIES_URL}">Shop policies</a></footer></body></html>"""
        return web.Response(text=html, content_type="text/html", status=status)

    async def _home(self, request: web.Request) -> web.Response:
        body = ("<h1>Welcome to the shop</h1><p>Search our catalogue of "
                f"{len(self.catalog)} products with the search box above.</p>")
        return self._page(request, "Home", body)

    async def _search(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "").strip()
        try:
            page = max(1, int(request.query.get("page", "1")))
        except ValueError:
            page = 1
        ids = self.index.search(query, MAX_RESULTS) if query else []
        pages = max(1, -(-len(ids) // PER_PAGE))
        page = min(page, pages)
        shown = ids[(page - 1) * PER_PAGE: page * PER_PAGE]
        back = urlencode({"q": query, "page": page})
        items = "".join(
            f'<li><a href="/product/{p.id}?{back}">{escape(p.title)}</a> '
            f"<span>${p.price:.2f}</span> <span>rating {p.rating:.1f}</span></li>"
            for p in map(self._get, shown))
        nav = []
        if page > 1:
            nav.append(f'<a href="/search?{urlencode({"q": query, "page": page - 1})}">'
                       "&lt; Prev</a>")
        if page < pages:
            nav.append(f'<a href="/search?{urlencode({"q": query, "page": page + 1})}">'
                       "Next &gt;</a>")
        found = (f"<p>Page {page} of {pages} ({len(ids)} products)</p><ol>{items}</ol>"
                 if ids else "<p>No products match your search.</p>")
        body = (f"<h1>Results for &quot;{escape(query)}&quot;</h1>{found}"
                f"<nav aria-label=\"Pages\">{' '.join(nav)}</nav>")
        return self._page(request, f"Search {query}", body, query=query)

    async def _product(self, request: web.Request) -> web.Response:
        product = self._get(request.match_info["pid"])
        selects = "".join(
            f'<p><label>{escape(kind)} <select name="opt_{escape(kind)}" '
            f'aria-label="{escape(kind)}">'
            f'<option value="">choose {escape(kind)}</option>'
            + "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
            + "</select></label></p>"
            for kind, values in product.options.items())
        missing = request.query.get("error", "")
        error = (f'<p role="alert">Please choose a {escape(missing)} before adding to the cart.'
                 "</p>" if missing else "")
        back = ""
        if "q" in request.query:
            params = urlencode({"q": request.query["q"], "page": request.query.get("page", "1")})
            back = f'<p><a href="/search?{params}">Back to results</a></p>'
        body = (f"{back}<h1>{escape(product.title)}</h1>"
                f"<p>Price: ${product.price:.2f}</p><p>Rating: {product.rating:.1f} of 5</p>"
                f"<p>Category: {product.department} / {product.product_type}</p>"
                f"<p>Features: {escape(', '.join(product.attributes))}</p>"
                f"<p>{escape(product.description)}</p>{error}"
                f'<form action="/cart/add" method="post">'
                f'<input type="hidden" name="product" value="{product.id}">{selects}'
                "<button type=\"submit\">Add to cart</button></form>")
        return self._page(request, product.title, body)

    async def _cart_add(self, request: web.Request) -> web.Response:
        form = await request.post()
        product = self._get(str(form.get("product", "")))
        chosen: dict[str, str] = {}
        for kind, values in product.options.items():
            value = str(form.get(f"opt_{kind}", ""))
            if value not in values:  # nothing chosen, or a value this product lacks
                raise web.HTTPSeeOther(f"/product/{product.id}?{urlencode({'error': kind})}")
            chosen[kind] = value
        request[SESSION].cart.append(CartLine(product.id, chosen))
        raise web.HTTPSeeOther("/cart")

    async def _cart(self, request: web.Request) -> web.Response:
        cart = request[SESSION].cart
        lines = []
        for i, line in enumerate(cart, 1):
            p = self._get(line.product_id)
            opts = ", ".join(f"{k}: {v}" for k, v in line.options.items())
            lines.append(
                f"<li>{escape(p.title)} ({escape(opts)}) ${p.price:.2f}"
                f'<form action="/cart/remove" method="post"><input type="hidden" name="line" '
                f'value="{i}"><button type="submit">Remove item {i}</button></form></li>')
        if not cart:
            body = "<h1>Your cart</h1><p>Your cart is empty.</p>"
        else:
            total = sum(self._get(line.product_id).price for line in cart)
            body = (f"<h1>Your cart</h1><ol>{''.join(lines)}</ol><p>Total: ${total:.2f}</p>"
                    '<form action="/checkout" method="post">'
                    '<button type="submit">Place order</button></form>')
        return self._page(request, "Cart", body)

    async def _cart_remove(self, request: web.Request) -> web.Response:
        form = await request.post()
        cart = request[SESSION].cart
        try:
            del cart[int(str(form.get("line", ""))) - 1]
        except (ValueError, IndexError):
            pass  # a stale line number: show the cart as it is
        raise web.HTTPSeeOther("/cart")

    async def _checkout(self, request: web.Request) -> web.Response:
        session: ShopSession = request[SESSION]
        if session.cart and session.order is None:
            session.order, session.cart = tuple(session.cart), []
        raise web.HTTPSeeOther("/order" if session.order is not None else "/cart")

    async def _order(self, request: web.Request) -> web.Response:
        order = request[SESSION].order
        if order is None:
            return self._page(request, "Order", "<h1>No order yet</h1>", status=404)
        items = "".join(f"<li>{escape(self._get(line.product_id).title)}</li>" for line in order)
        return self._page(request, "Order placed",
                          f"<h1>Thank you, your order is placed</h1><ol>{items}</ol>")
