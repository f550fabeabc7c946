"""The declared dependencies admit the versions the code needs (and only those)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _requirement(extra: str, name: str) -> Requirement:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return next(r for r in map(Requirement, extras[extra]) if r.name == name)


def test_mcp_requirement_is_mcp_2():
    spec = _requirement("tools", "mcp").specifier
    assert "1.9.0" not in spec  # mcp 1 has no mcp.Client nor mcp.server.mcpserver
    assert importlib.metadata.version("mcp") in spec
    import mcp
    from mcp.server.mcpserver import MCPServer  # noqa: F401 - what the MCP env needs

    assert hasattr(mcp, "Client")
