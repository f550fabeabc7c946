"""MCP tool use: any MCP server (stdio or streamable HTTP) as an env's tool set."""

from agentgym.envs.mcp.env import MCPConnection, MCPEnv, MCPToolError
from agentgym.envs.mcp.inventory_env import InventoryEnv

__all__ = ["InventoryEnv", "MCPConnection", "MCPEnv", "MCPToolError"]
