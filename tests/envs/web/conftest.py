"""Shared shop server and Chromium for the web env tests, on one session-wide event loop.

Test modules here mark themselves ``pytest.mark.asyncio(loop_scope="session")``: one loop
for the directory, so the shared server and browser can be reused. The ``web_shared``
fixture holds a reference to the shop server and ``shared_browser`` one to Chromium, so
envs made in tests reuse them instead of starting their own. When the session ends they are
given back and the fixture checks that no browser process is left.
"""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
import pytest_asyncio

CATALOG = (0, 1000)
"""Catalogue seed and size the tests use (smaller than the default 5,000: faster index)."""


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def web_shared():
    from agentgym.envs.web.shared import browser_processes, shared

    pools = shared()
    site = await pools.sites.acquire(CATALOG)
    yield site
    await pools.sites.release(CATALOG, site)
    for _ in range(50):  # browsers exit a moment after close()
        if not browser_processes():
            break
        await asyncio.sleep(0.1)
    assert browser_processes() == [], "browser processes were left behind by the web tests"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def shared_browser(web_shared):
    if shutil.which("chromium") is None:
        if os.environ.get("AGENTGYM_REQUIRE_BROWSER") == "1":  # CI: never skip
            pytest.fail("AGENTGYM_REQUIRE_BROWSER=1 but Chromium is not installed")
        pytest.skip("Chromium is not installed (apt-get install -y chromium)")
    from agentgym.envs.web.shared import shared

    pools = shared()
    handle = await pools.browsers.acquire("chromium")
    yield handle
    await pools.browsers.release("chromium", handle)
