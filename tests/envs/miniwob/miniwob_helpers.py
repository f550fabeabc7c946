"""Helpers the MiniWoB tests share: the skip rule, the leak check, a tool-call builder."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil

import pytest

from agentgym import Message, ToolCall


def call(name: str, **arguments: object) -> Message:
    """An assistant message with one tool call."""
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, arguments),))


def needs_browser() -> None:
    """Skip when Chromium or the miniwob package is missing (fail instead under CI)."""
    missing = [what for what, ok in (("Chromium (apt-get install -y chromium)",
                                      shutil.which("chromium") is not None),
                                     ("the miniwob package (pip install 'agentgym[miniwob]')",
                                      importlib.util.find_spec("miniwob") is not None)) if not ok]
    if missing:
        if os.environ.get("AGENTGYM_REQUIRE_BROWSER") == "1":  # CI: never skip
            pytest.fail(f"AGENTGYM_REQUIRE_BROWSER=1 but {' and '.join(missing)} is missing")
        pytest.skip(f"{' and '.join(missing)} is not installed")


async def settle(before: set[int]) -> list[int]:
    """Browser processes started since ``before`` that are still running (after a grace)."""
    from agentgym.envs.web.shared import browser_processes

    for _ in range(50):  # browsers exit a moment after close()
        left = sorted(set(browser_processes()) - before)
        if not left:
            break
        await asyncio.sleep(0.1)
    return left
