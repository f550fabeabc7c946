"""A small MCP server over a generated warehouse inventory, and questions about it.

Run it as ``python inventory.py [stdio | http PORT]``. Tools:
``list_warehouses()``, ``list_items()`` and ``stock(item, warehouse)``. The inventory comes
from a fixed seed, so the env computes the answers without talking to the server; a question
("How many units of lamp oil are stored across all warehouses?") needs one ``stock`` call
per warehouse.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

SEED = 7_001
WAREHOUSES = ("north", "harbor", "airport", "valley", "river")
ITEMS = ("lamp oil", "rope", "copper wire", "salt", "nails", "canvas", "tea", "soap", "wax",
         "flour", "glass jars", "wool", "iron bars", "paper", "candles", "linen", "coffee",
         "sugar", "cork", "twine")


@functools.cache
def inventory() -> dict[str, dict[str, int]]:
    """Units of each item in each warehouse (``inventory()[item][warehouse]``)."""
    rng = np.random.default_rng(SEED)
    return {item: {w: int(rng.integers(0, 900)) for w in WAREHOUSES} for item in ITEMS}


def questions() -> list[dict[str, object]]:
    """Every question with its answer: totals per item, and the best-stocked warehouse."""
    out: list[dict[str, object]] = []
    for item, per in inventory().items():
        out.append({"id": f"total-{item.replace(' ', '-')}",
                    "prompt": f"How many units of {item} are stored across all warehouses?",
                    "answer": sum(per.values()), "item": item})
        out.append({"id": f"most-{item.replace(' ', '-')}",
                    "prompt": f"Which warehouse holds the most {item}?",
                    "answer": max(per, key=lambda w: (per[w], w)), "item": item})
    return out


def build_server():  # noqa: ANN201 - the mcp type is imported lazily
    """The MCP server (needs the ``mcp`` package)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("agentgym-inventory", log_level="WARNING")

    @server.tool()
    def list_warehouses() -> list[str]:
        """The names of all warehouses."""
        return list(WAREHOUSES)

    @server.tool()
    def list_items() -> list[str]:
        """The names of all stocked items."""
        return list(ITEMS)

    @server.tool()
    def stock(item: str, warehouse: str) -> int:
        """Units of an item stored in one warehouse.

        Args:
            item: Item name, e.g. "rope".
            warehouse: Warehouse name, e.g. "north".
        """
        if item not in inventory():
            raise ToolError(f"unknown item {item!r}; call list_items")
        if warehouse not in WAREHOUSES:
            raise ToolError(f"unknown warehouse {warehouse!r}; call list_warehouses")
        return inventory()[item][warehouse]

    return server


if __name__ == "__main__":
    args = sys.argv[1:] or ["stdio"]
    if args[0] == "http":
        build_server().run("streamable-http", host="127.0.0.1", port=int(args[1]))
    else:
        build_server().run("stdio")
