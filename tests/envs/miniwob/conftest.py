"""Chromium for the MiniWoB tests, one per test module, on the session-wide event loop.

Test modules here mark themselves ``pytest.mark.asyncio(loop_scope="session")``. The
``browser`` fixture holds a reference to the loop's shared Chromium for one module, so the
envs made in its tests reuse it; when the module ends it is given back and the fixture
checks that every browser process it caused has exited. (Module scope, not session: the
web tests' own session fixture checks for leftover browsers when the session ends.)
"""

from __future__ import annotations

import pytest_asyncio
from miniwob_helpers import needs_browser, settle


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser():
    needs_browser()
    from agentgym.envs.web.shared import browser_processes, shared

    before = set(browser_processes())
    pools = shared()
    handle = await pools.browsers.acquire("chromium")
    yield handle
    await pools.browsers.release("chromium", handle)
    assert await settle(before) == [], "browser processes were left behind by the MiniWoB tests"
