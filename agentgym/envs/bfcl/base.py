"""What the BFCL envs share: the category and split they serve, and how reset picks an entry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentgym.env import BaseEnv
from agentgym.envs.bfcl.data import SPLITS, BFCLTask, bfcl_modules, bfcl_version, get_task
from agentgym.envs.bfcl.data import category as find_category
from agentgym.errors import ConfigError
from agentgym.types import ToolSpec


class BFCLBaseEnv(BaseEnv):
    """Base of the BFCL envs: one category's entries in one split.

    Args:
        category: The BFCL category name.
        split: ``"all"`` (every entry, file order), or the fixed ``"train"``/``"test"``
            partition by id hash.
        multi_turn: Whether the env plays the multi-turn categories (else single-turn).

    Raises:
        ConfigError: Unknown category (with the closest names), one of the other kind, or
            an unknown split.
    """

    def __init__(self, category: str, split: str, *, multi_turn: bool) -> None:
        super().__init__()
        self.category = find_category(category, multi_turn=multi_turn)
        bfcl_modules()  # a missing package is the caller's to fix: say so now, not at reset
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        self.task: BFCLTask | None = None
        self.tools: tuple[ToolSpec, ...] = ()

    def _pick_task(self, seed: int | None, options: Mapping[str, Any]) -> BFCLTask:
        """Set and return the entry a reset plays.

        That is ``options["task_id"]`` when given, else entry ``seed`` of the split (a random
        one without a seed).
        """
        task_id = options.get("task_id")
        index = seed if seed is not None else int(self.np_random.integers(1 << 30))
        self.task = get_task(self.category.name, self.split, index=index,
                             task_id=None if task_id is None else str(task_id))
        return self.task

    def _info(self) -> dict[str, Any]:
        assert self.task is not None
        return {"task_id": self.task.id, "category": self.category.name,
                "bfcl_version": bfcl_version()}
