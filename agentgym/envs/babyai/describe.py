"""The agent's view as language: what BabyAI's 7x7 egocentric observation shows, in words.

minigrid encodes the view as a ``(7, 7, 3)`` array of (object, colour, state) indices, with
the agent at column 3 of the bottom row looking "up" the array. We name every object in view
by its offset from the agent ("a red ball 2 steps forward and 1 step left") and, for walls,
only the nearest one straight ahead, to the left and to the right, so the text stays short.
What the agent cannot see (behind walls and closed doors) is not mentioned.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

_OBJECT = {v: k for k, v in OBJECT_TO_IDX.items()}
_COLOR = {v: k for k, v in COLOR_TO_IDX.items()}
_STATE = {v: k for k, v in STATE_TO_IDX.items()}
_AGENT_COL, _AGENT_ROW = 3, 6
_THINGS = {"door", "key", "ball", "box", "goal", "lava"}


def _steps(n: int, word: str) -> str:
    return f"{n} step{'s' if n != 1 else ''} {word}"


def _where(forward: int, right: int) -> str:
    parts = []
    if forward:
        parts.append(_steps(forward, "forward"))
    if right:
        parts.append(_steps(abs(right), "right" if right > 0 else "left"))
    return " and ".join(parts)


def _name(cell: np.ndarray) -> str:
    kind, color = _OBJECT[int(cell[0])], _COLOR[int(cell[1])]
    if kind == "door":
        return f"a {_STATE[int(cell[2])]} {color} door"
    if kind in ("goal", "lava"):
        return f"a {kind}"
    return f"a {color} {kind}"


def describe_view(image: np.ndarray, carrying: Any) -> list[str]:
    """Sentences describing the egocentric view.

    Args:
        image: minigrid's encoded view, shape ``(7, 7, 3)``, indexed ``[column, row]``.
        carrying: The object the agent holds (a minigrid ``WorldObj``) or ``None``.

    Returns:
        One sentence per visible object and per nearest wall, then what the agent carries.
    """
    lines: list[str] = []
    for row in range(_AGENT_ROW, -1, -1):  # nearest first
        for col in range(image.shape[0]):
            if (col, row) == (_AGENT_COL, _AGENT_ROW):
                continue  # the agent's own cell (minigrid shows the carried object there)
            if _OBJECT[int(image[col, row, 0])] in _THINGS:
                where = _where(_AGENT_ROW - row, col - _AGENT_COL)
                lines.append(f"{_name(image[col, row])} {where}")
    for label, cells in (("forward", [(_AGENT_COL, r) for r in range(_AGENT_ROW - 1, -1, -1)]),
                         ("left", [(c, _AGENT_ROW) for c in range(_AGENT_COL - 1, -1, -1)]),
                         ("right", [(c, _AGENT_ROW) for c in range(_AGENT_COL + 1, 7)])):
        for distance, (col, row) in enumerate(cells, start=1):
            kind = _OBJECT[int(image[col, row, 0])]
            if kind == "wall":
                lines.append(f"a wall {_steps(distance, label)}")
            if kind not in ("empty", "floor"):
                break  # the first non-empty cell hides what lies beyond it on this line
    if carrying is not None:
        lines.append(f"you carry a {carrying.color} {carrying.type}")
    return lines
