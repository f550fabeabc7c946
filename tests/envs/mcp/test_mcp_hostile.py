"""Arguments the MCP wire cannot carry are the agent's mistake, not a dead server."""

from __future__ import annotations

import pytest

import agentgym
from agentgym import Message, ToolCall

pytest.importorskip("mcp")


async def test_a_lone_surrogate_in_arguments_is_an_invalid_call_and_the_server_lives():
    env = agentgym.make("agentgym/MCPInventory-v0")
    try:
        await env.reset(seed=0)
        bad = Message("assistant", "", tool_calls=(ToolCall("c1", "stock", {
            "item": "\ud800", "warehouse": "a\udfffb"}),))
        result = await env.step(bad)  # used to close the transport: a ToolFault, an error
        assert not result.valid and "UTF-8" in result.observation[0].content
        ok = await env.step(Message("assistant", "", tool_calls=(
            ToolCall("c2", "list_warehouses", {}),)))
        assert ok.valid  # the same connection still answers
    finally:
        await env.aclose()
