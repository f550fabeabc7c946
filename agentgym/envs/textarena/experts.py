"""Oracle moves read from a TextArena game's own hidden state.

TextArena ships no bots for its single-player games, but every game below keeps its answer
in its state (the secret number, the code, the Sudoku solution, the crossword letters, the
mine positions) or is solved by a short search over the state (FrozenLake, Tower of Hanoi,
Lights Out, Sokoban).
Each function returns the next move in the game's own action format; replaying these moves
through the env must reach TextArena's own win (reward 1), which is what the tests check.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

_MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def frozen_lake(game: Any) -> str:
    """Breadth-first search around the holes to the goal; the path's first move."""
    grid, start, goal = (game.state.game_state[k] for k in ("grid", "player_pos", "goal_pos"))
    size = len(grid)
    first: dict[tuple[int, int], str | None] = {tuple(start): None}
    queue = deque([tuple(start)])
    while queue:
        pos = queue.popleft()
        if pos == tuple(goal):
            return f"[{first[pos]}]"
        for name, (dr, dc) in _MOVES.items():
            nxt = (pos[0] + dr, pos[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in first \
                    and grid[nxt[0]][nxt[1]] != "H":
                first[nxt] = first[pos] or name
                queue.append(nxt)
    raise RuntimeError("FrozenLake: no path to the goal from the current position")


def tower_of_hanoi(game: Any) -> str:
    """The optimal next move from any legal position, moving every disk to tower C."""
    towers = {k: list(v) for k, v in game.state.game_state["towers"].items()}
    where = {disk: peg for peg, disks in towers.items() for disk in disks}

    def move(disk: int, target: str) -> tuple[str, str] | None:
        if disk == 0:
            return None
        source = where[disk]
        if source == target:
            return move(disk - 1, target)
        spare = ({"A", "B", "C"} - {source, target}).pop()
        smaller = move(disk - 1, spare)  # clear the smaller disks onto the spare peg first
        return smaller if smaller is not None else (source, target)

    step = move(max(where), "C")
    if step is None:
        raise RuntimeError("TowerOfHanoi: already solved")
    return f"[{step[0]} {step[1]}]"


def guess_the_number(game: Any) -> str:
    """The secret number."""
    return f"[{game.state.game_state['game_number']}]"


def mastermind(game: Any) -> str:
    """The secret code."""
    return "[" + " ".join(map(str, game.state.game_state["secret_code"])) + "]"


def sudoku(game: Any) -> str:
    """The solution's digit for the first empty cell (1-indexed, as the game reads it)."""
    board = game.state.game_state["board"]
    for r, row in enumerate(board):
        for c, value in enumerate(row):
            if value == 0:
                return f"[{r + 1} {c + 1} {game.full_grid[r][c]}]"
    raise RuntimeError("Sudoku: no empty cell left")


def crosswords(game: Any) -> str:
    """The solution's letter for the first blank cell."""
    state = game.state.game_state
    for r, row in enumerate(state["board"]):
        for c, value in enumerate(row):
            if value == "_":
                return f"[{r} {c} {state['solution'][r][c]}]"
    raise RuntimeError("Crosswords: no blank cell left")


def minesweeper(game: Any) -> str:
    """The first hidden cell that holds no mine (mines are laid after the first click)."""
    if game.first_move:
        return f"[{game.rows // 2} {game.cols // 2}]"
    for r in range(game.rows):
        for c in range(game.cols):
            if not game.revealed[r][c] and game.grid[r][c] != -1:
                return f"[{r} {c}]"
    raise RuntimeError("Minesweeper: every safe cell is revealed")


def lights_out(game: Any) -> str:
    """A press of the fewest-press solution, by light chasing.

    Pressing a cell toggles it and its four neighbours; the order of presses does not matter.
    For each of the 2^n choices of presses in the top row, pressing every cell whose upper
    neighbour is still on clears rows 0..n-2; the choices that also clear the last row are
    the solutions, and the one with fewest presses is within the game's move limit (it
    scrambles with at most 15 presses and allows 20).
    """
    grid = [[bool(v) for v in row] for row in game.state.game_state["grid"]]
    n = len(grid)

    def press(g: list[list[bool]], r: int, c: int) -> None:
        for dr, dc in ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)):
            if 0 <= r + dr < n and 0 <= c + dc < n:
                g[r + dr][c + dc] = not g[r + dr][c + dc]

    best: list[tuple[int, int]] | None = None
    for mask in range(1 << n):
        g = [row[:] for row in grid]
        presses = [(0, c) for c in range(n) if mask >> c & 1]
        for r, c in presses:
            press(g, r, c)
        for r in range(1, n):
            for c in range(n):
                if g[r - 1][c]:
                    press(g, r, c)
                    presses.append((r, c))
        if not any(g[n - 1]) and (best is None or len(presses) < len(best)):
            best = presses
    if not best:
        raise RuntimeError("LightsOut: the grid has no solution (or is already solved)")
    return f"[{best[0][0]} {best[0][1]}]"


def sokoban(game: Any) -> str:
    """Breadth-first search over (player, boxes) to all boxes on targets; the first move.

    The rooms are small (6x6, 3 boxes), so the whole reachable state space fits; the
    shortest solution comes first, within the game's turn limit when one exists.
    """
    fixed, room = game.room_fixed, game.room_state
    rows, cols = room.shape
    walls = {(r, c) for r in range(rows) for c in range(cols) if fixed[r, c] == 0}
    targets = frozenset((r, c) for r in range(rows) for c in range(cols) if fixed[r, c] == 2)
    boxes = frozenset((r, c) for r in range(rows) for c in range(cols) if room[r, c] in (3, 4))
    start = (tuple(int(v) for v in game.player_position), boxes)
    first: dict[Any, str | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        (pr, pc), bx = state
        if bx <= targets:
            if first[state] is None:
                raise RuntimeError("Sokoban: every box is on a target already")
            return f"[{first[state]}]"
        for name, (dr, dc) in _MOVES.items():
            nxt = (pr + dr, pc + dc)
            if not (0 <= nxt[0] < rows and 0 <= nxt[1] < cols) or nxt in walls:
                continue
            if nxt in bx:  # push: the cell beyond must be free floor inside the room
                beyond = (nxt[0] + dr, nxt[1] + dc)
                if not (0 <= beyond[0] < rows and 0 <= beyond[1] < cols) \
                        or beyond in walls or beyond in bx:
                    continue
                new = (nxt, (bx - {nxt}) | {beyond})
            else:
                new = (nxt, bx)
            if new not in first:
                first[new] = first[state] or name
                queue.append(new)
    raise RuntimeError("Sokoban: no sequence of moves puts every box on a target")


EXPERTS: dict[str, Callable[[Any], str]] = {
    "FrozenLake": frozen_lake,
    "TowerOfHanoi": tower_of_hanoi,
    "GuessTheNumber": guess_the_number,
    "Mastermind": mastermind,
    "Sudoku": sudoku,
    "Crosswords": crosswords,
    "Minesweeper": minesweeper,
    "LightsOut": lights_out,
    "Sokoban": sokoban,
}
"""Games with an oracle; the others (2048, FifteenPuzzle) have none."""
