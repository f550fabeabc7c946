"""Seeded generation of solvable Sokoban levels by reverse play.

Generation follows gym-sokoban (Schrader 2018), also used by verl-agent: carve a room by a
random walk with small brush masks, put every box on a target, then play *backwards*, so
the state reached is solvable by construction. Deviation: instead of gym-sokoban's
depth-first search over single reverse moves (where a pull needs the player to stand next
to a box by chance), each backward step is a macro move: pick a box and a side, walk there
if reachable, and pull the box one cell. ``max_steps`` such attempts are made and the
hardest state is kept (most boxes off target, then the largest total distance from boxes
to their nearest target); the player then starts on a random cell it can reach.

Example:
    >>> import numpy as np
    >>> from agentgym.envs.sokoban.level import move, solve
    >>> level = generate(6, 1, np.random.default_rng(0))
    >>> for direction in solve(level):
    ...     level, _ = move(level, direction)
    >>> level.solved
    True
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agentgym.errors import ConfigError

from .level import DIRECTIONS, Level, Pos

MIN_SIZE, MAX_SIZE = 5, 32  # 5 leaves a 3x3 interior; 32 keeps the board ~1k tokens
_MAX_ROOM_TRIES = 50  # fresh rooms to try before blaming the settings
# gym-sokoban's brushes: a random one is stamped around the digger at every step.
_MASKS = np.array([
    [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
    [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
    [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
], dtype=bool)


def check_params(size: int, num_boxes: int, max_steps: int) -> None:
    """Raise :class:`~agentgym.errors.ConfigError` unless the generator settings are usable."""
    if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
        raise ConfigError(f"expected size to be an int in [{MIN_SIZE}, {MAX_SIZE}] (the grid is "
                          f"size x size including the outer walls), got {size!r}; fix: pass "
                          "size=6 (the default) or another value in that range")
    most = max(1, (size - 2) ** 2 // 4)  # beyond a quarter of the interior, rooms jam
    if (isinstance(num_boxes, bool) or not isinstance(num_boxes, int)
            or not 1 <= num_boxes <= most):
        raise ConfigError(f"expected num_boxes to be an int in [1, {most}] for size={size}, got "
                          f"{num_boxes!r}; fix: pass fewer boxes or a larger size")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(f"expected max_steps_generation to be a positive int, got "
                          f"{max_steps!r}; fix: pass max_steps_generation=100 (the default)")


def generate(size: int, num_boxes: int, rng: np.random.Generator, max_steps: int = 100,
             ) -> Level:
    """A random solvable level; the same ``rng`` state always gives the same level.

    Args:
        size: The grid is ``size x size`` including the outer walls.
        num_boxes: Boxes (and targets) to place.
        rng: Source of all randomness.
        max_steps: Backward pull attempts; more attempts scatter the boxes further.

    Raises:
        ConfigError: bad settings, or no level with a box off target was found in
            ``_MAX_ROOM_TRIES`` rooms (too many boxes for the room, or ``max_steps`` too small).
    """
    check_params(size, num_boxes, max_steps)
    for _ in range(_MAX_ROOM_TRIES):
        floor = _carve_room(size, rng)
        cells = [(int(r), int(c)) for r, c in np.argwhere(floor)]
        if len(cells) < num_boxes + 2:  # a cramped room: boxes, player and one free cell
            continue
        picks = rng.choice(len(cells), size=num_boxes + 1, replace=False)
        targets = frozenset(cells[i] for i in picks[:-1])
        walls = frozenset((r, c) for r in range(size) for c in range(size) if not floor[r, c])
        goal = Level(size, size, walls, targets, targets, cells[picks[-1]])
        level = _reverse_play(goal, rng, max_steps)
        if level is not None:
            return level
    raise ConfigError(f"could not generate a {size}x{size} level with {num_boxes} box(es) in "
                      f"{_MAX_ROOM_TRIES} tries; fix: use fewer boxes, a larger size or a "
                      "larger max_steps_generation")


def _carve_room(size: int, rng: np.random.Generator) -> np.ndarray:
    """Floor mask: a digger walks the interior, stamping a random brush at every step."""
    floor = np.zeros((size, size), dtype=bool)
    pos = rng.integers(1, size - 1, size=2)
    offsets = np.array(list(DIRECTIONS.values()))
    step = offsets[rng.integers(4)]
    for _ in range(int(1.5 * 2 * size)):  # gym-sokoban: 1.5 * (width + height) steps
        if rng.random() < 0.35:
            step = offsets[rng.integers(4)]
        pos = np.clip(pos + step, 1, size - 2)
        floor[pos[0] - 1:pos[0] + 2, pos[1] - 1:pos[1] + 2] |= _MASKS[rng.integers(len(_MASKS))]
    floor[[0, -1], :] = floor[:, [0, -1]] = False  # the outer ring is always wall
    return floor


def _reverse_play(goal: Level, rng: np.random.Generator, max_steps: int) -> Level | None:
    """The hardest state of a random backward game from ``goal``; None if no box moved off.

    Each backward step picks a box and a side; if the player can walk to that side and step
    one cell further away, it does, pulling the box along. Forward, that is a push followed
    by a walk back, so every state reached is solvable.
    """
    player, boxes = goal.player, set(goal.boxes)
    names = list(DIRECTIONS)
    best, best_score = None, (0, 0)
    for _ in range(max_steps):
        box = sorted(boxes)[rng.integers(len(boxes))]  # sorted: set order is not seeded
        dr, dc = DIRECTIONS[names[rng.integers(4)]]
        stand, dest = (box[0] + dr, box[1] + dc), (box[0] + 2 * dr, box[1] + 2 * dc)
        free = [not goal.blocked(p) and p not in boxes for p in (stand, dest)]
        if not all(free) or stand not in _reachable(goal, player, boxes):
            continue
        boxes.remove(box)
        boxes.add(stand)
        player = dest
        off = [b for b in boxes if b not in goal.targets]
        spread = sum(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in goal.targets)
                     for b in off)
        if (len(off), spread) > best_score:
            best, best_score = (player, frozenset(boxes)), (len(off), spread)
    if best is None:
        return None
    # Start the player anywhere it could walk to, so it need not begin next to a box.
    cells = sorted(_reachable(goal, *best))
    return replace(goal, player=cells[rng.integers(len(cells))], boxes=best[1])


def _reachable(level: Level, start: Pos, boxes: set[Pos] | frozenset[Pos]) -> set[Pos]:
    """Cells the player can walk to from ``start`` without pushing anything."""
    seen, todo = {start}, [start]
    while todo:
        r, c = todo.pop()
        for dr, dc in DIRECTIONS.values():
            nxt = (r + dr, c + dc)
            if nxt not in seen and not level.blocked(nxt) and nxt not in boxes:
                seen.add(nxt)
                todo.append(nxt)
    return seen
