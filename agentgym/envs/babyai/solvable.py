"""Which locked doors of a generated BabyAI level can never be opened.

minigrid's ``Unlock`` level means to put the key "in a different room" than the locked
door's, but compares the room indices with ``is`` on numpy integers, which is never true, so
the key may land in the room the locked door shuts. When that room has no other door the key
is out of reach and the level cannot be solved by anyone (its BabyAI bot then plans "open the
door, fetch the key, open the door, ..." without end). This check finds such doors, so that
tests and measurements can tell an unsolvable seed from a failure of the bot.

Reachability is a fixed point: from the agent's cell, walk over floor, objects (they can be
picked up and moved) and unlocked doors; a locked door becomes passable once a key of its
colour lies in a reached cell (or in a reached box, or is carried).
"""

from __future__ import annotations

from typing import Any


def _keys_in(obj: Any) -> set[str]:
    if obj is None:
        return set()
    if obj.type == "key":
        return {obj.color}
    if obj.type == "box":
        return _keys_in(obj.contains)
    return set()


def unopenable_doors(minigrid: Any) -> list[tuple[int, int, str]]:
    """The locked doors next to the agent's reachable area that no reachable key opens.

    Args:
        minigrid: A reset minigrid level (``gymnasium.make(...).unwrapped``).

    Returns:
        ``(x, y, colour)`` of each such door, empty when every locked door the agent can walk
        up to can also be unlocked.
    """
    grid = minigrid.grid
    start = tuple(int(v) for v in minigrid.agent_pos)
    keys = _keys_in(minigrid.carrying)
    reached: set[tuple[int, int]] = set()
    blocked: dict[tuple[int, int], str] = {}  # locked doors met so far -> their colour
    frontier = [start]
    while frontier:
        while frontier:
            x, y = frontier.pop()
            if (x, y) in reached:
                continue
            reached.add((x, y))
            for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if not (0 <= nx < grid.width and 0 <= ny < grid.height) or (nx, ny) in reached:
                    continue
                cell = grid.get(nx, ny)
                if cell is not None and cell.type == "wall":
                    continue
                if cell is not None and cell.type == "door" and cell.is_locked:
                    blocked[(nx, ny)] = cell.color
                    continue
                keys |= _keys_in(cell)
                frontier.append((nx, ny))
        opened = [pos for pos, colour in blocked.items() if colour in keys]
        for pos in opened:  # a key for it is in reach: the door counts as floor from now on
            del blocked[pos]
            frontier.append(pos)
    return sorted((x, y, colour) for (x, y), colour in blocked.items())
