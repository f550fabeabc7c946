r"""Sokoban rules: the board (:class:`Level`), the move rule and a BFS solver.

Coordinates are ``(row, col)`` from the top-left corner; ``up`` is row - 1. The env, the
generator and the solver all move through :func:`move`'s rule, so a solver plan is exactly
what the env will play.

Example:
    >>> level = Level.from_text("# # # # #\n# P X O #\n# # # # #")
    >>> solve(level)
    ['right']
    >>> move(level, "right")[0].render()
    '# # # # #\n# _ P √ #\n# # # # #'
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Literal

Pos = tuple[int, int]
MoveOutcome = Literal["moved", "pushed", "blocked"]

DIRECTIONS: dict[str, Pos] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
"""Action name -> (row, col) offset."""


@dataclass(frozen=True)
class Level:
    """An immutable Sokoban state.

    Attributes:
        height: Rows of the grid.
        width: Columns of the grid.
        walls: Wall cells (cells outside the grid count as walls too).
        targets: Target cells; as many as boxes.
        boxes: Box cells.
        player: The player's cell.
    """

    height: int
    width: int
    walls: frozenset[Pos]
    targets: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    @property
    def boxes_on_target(self) -> int:
        """Number of boxes standing on a target."""
        return len(self.boxes & self.targets)

    @property
    def solved(self) -> bool:
        """Whether every box is on a target."""
        return self.boxes == self.targets

    def blocked(self, pos: Pos) -> bool:
        """Whether ``pos`` is a wall or off the grid."""
        r, c = pos
        return pos in self.walls or not (0 <= r < self.height and 0 <= c < self.width)

    def render(self) -> str:
        """The grid as text, one row per line, cells separated by spaces.

        Symbols (verl-agent's): ``#`` wall, ``_`` floor, ``O`` target, ``X`` box,
        ``√`` box on target, ``P`` player, ``S`` player on target.
        """
        rows = []
        for r in range(self.height):
            rows.append(" ".join(self._symbol((r, c)) for c in range(self.width)))
        return "\n".join(rows)

    def _symbol(self, pos: Pos) -> str:
        on_target = pos in self.targets
        if pos in self.walls:
            return "#"
        if pos in self.boxes:
            return "√" if on_target else "X"
        if pos == self.player:
            return "S" if on_target else "P"
        return "O" if on_target else "_"

    @classmethod
    def from_text(cls, text: str) -> Level:
        """Parse a grid written with the :meth:`render` symbols (spaces between cells optional).

        Raises:
            ValueError: unknown symbol, ragged rows, not exactly one player, or a box count
                that differs from the target count.
        """
        rows = [line.replace(" ", "") for line in text.strip("\n").splitlines() if line.strip()]
        if not rows or len({len(row) for row in rows}) != 1:
            raise ValueError(f"expected a rectangular grid of symbols, got rows {rows!r}")
        cells: dict[str, set[Pos]] = {s: set() for s in "#_OX√PS"}
        for r, row in enumerate(rows):
            for c, symbol in enumerate(row):
                if symbol not in cells:
                    raise ValueError(f"expected one of {''.join(cells)} in the grid, got "
                                     f"{symbol!r} at row {r}, column {c}")
                cells[symbol].add((r, c))
        players = cells["P"] | cells["S"]
        boxes = cells["X"] | cells["√"]
        targets = cells["O"] | cells["√"] | cells["S"]
        if len(players) != 1:
            raise ValueError(f"expected exactly one player (P or S), got {len(players)}")
        if not boxes or len(boxes) != len(targets):
            raise ValueError(f"expected as many boxes as targets (at least one), got "
                             f"{len(boxes)} boxes and {len(targets)} targets")
        return cls(len(rows), len(rows[0]), frozenset(cells["#"]), frozenset(targets),
                   frozenset(boxes), players.pop())


def _advance(level: Level, player: Pos, boxes: frozenset[Pos], direction: str,
             ) -> tuple[Pos, frozenset[Pos], MoveOutcome]:
    """Player and boxes after one move: walk, push one box, or bump (nothing changes)."""
    dr, dc = DIRECTIONS[direction]
    ahead = (player[0] + dr, player[1] + dc)
    if level.blocked(ahead):
        return player, boxes, "blocked"
    if ahead not in boxes:
        return ahead, boxes, "moved"
    beyond = (ahead[0] + dr, ahead[1] + dc)
    if level.blocked(beyond) or beyond in boxes:  # one box at a time, never through walls
        return player, boxes, "blocked"
    return ahead, (boxes - {ahead}) | {beyond}, "pushed"


def move(level: Level, direction: str) -> tuple[Level, MoveOutcome]:
    """Apply one move (``up``, ``down``, ``left`` or ``right``) to ``level``.

    Returns:
        The new level and what happened: ``moved``, ``pushed`` (a box moved) or
        ``blocked`` (wall, or a box that cannot move; the level is unchanged).

    Raises:
        ValueError: ``direction`` is not one of :data:`DIRECTIONS`.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"expected a direction in {list(DIRECTIONS)}, got {direction!r}")
    player, boxes, outcome = _advance(level, level.player, level.boxes, direction)
    return replace(level, player=player, boxes=boxes), outcome


def solve(level: Level, max_states: int = 200_000) -> list[str] | None:
    """Shortest solution by breadth-first search over (player, boxes) states.

    Args:
        level: The start state.
        max_states: Give up after visiting this many distinct states.

    Returns:
        The moves, in order (``[]`` if already solved), or ``None`` when no solution was
        found within ``max_states`` states (or none exists).
    """
    start = (level.player, level.boxes)
    if level.solved:
        return []
    parents: dict[tuple[Pos, frozenset[Pos]], tuple[tuple[Pos, frozenset[Pos]], str]] = {}
    seen = {start}
    queue = deque([start])
    while queue and len(seen) < max_states:
        state = queue.popleft()
        for direction in DIRECTIONS:
            player, boxes, outcome = _advance(level, *state, direction)
            nxt = (player, boxes)
            if outcome == "blocked" or nxt in seen:
                continue
            seen.add(nxt)
            parents[nxt] = (state, direction)
            if boxes == level.targets:  # walk the parent links back to the start
                path = []
                while nxt != start:
                    nxt, step = parents[nxt]
                    path.append(step)
                return path[::-1]
            queue.append(nxt)
    return None
