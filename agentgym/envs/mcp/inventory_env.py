"""MCPInventory: questions about a warehouse inventory served by a real MCP server process.

The server (:mod:`agentgym.envs.mcp.inventory`) runs over stdio, one process per env (it is
read-only, so episodes cannot leave state in it; it is restarted if it dies).
Questions ask for an item's total over every warehouse (one ``stock`` call per warehouse)
or for the warehouse that holds the most of it. Train and test splits are disjoint (every
fifth question is a test question); the seed picks the question.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from agentgym.envs.mcp import inventory
from agentgym.envs.mcp.env import MCPEnv
from agentgym.envs.mcp.inventory import WAREHOUSES, questions
from agentgym.errors import ConfigError
from agentgym.tool_env import Task
from agentgym.types import ToolCall

SPLITS = ("train", "test")


def _tasks(split: str) -> list[Task]:
    out = []
    for i, q in enumerate(questions()):
        if (i % 5 == 0) != (split == "test"):
            continue
        item = q["item"]
        calls = tuple(ToolCall(f"call_{k}", "stock", {"item": item, "warehouse": w})
                      for k, w in enumerate(WAREHOUSES))
        out.append(Task(str(q["id"]), str(q["prompt"]), q["answer"], solution=calls))
    return out


class InventoryEnv(MCPEnv):
    """The inventory questions over the bundled MCP server; see the module docstring.

    Args:
        split: ``"train"`` or ``"test"`` questions.
        call_timeout: Seconds per tool call.
    """

    def __init__(self, split: Literal["train", "test"] = "train",
                 call_timeout: float = 30.0) -> None:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        # run as a script: ``-m`` would import this package in the server process too
        super().__init__([sys.executable, str(Path(inventory.__file__))], _tasks(split),
                         verifier="exact", call_timeout=call_timeout,
                         fresh_server_per_episode=False,  # the server is read-only
                         system_prompt="You answer questions about a warehouse inventory "
                                       "using its tools.")
