"""Oracle moves read from a TextArena game's own hidden state.

TextArena ships no bots for its single-player games, but every game below keeps its answer
in its state (the secret number, the code, the Sudoku solution, the crossword letters, the
mine positions) or is solved by a short search over the state (FrozenLake, Tower of Hanoi).
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


EXPERTS: dict[str, Callable[[Any], str]] = {
    "FrozenLake": frozen_lake,
    "TowerOfHanoi": tower_of_hanoi,
    "GuessTheNumber": guess_the_number,
    "Mastermind": mastermind,
    "Sudoku": sudoku,
    "Crosswords": crosswords,
    "Minesweeper": minesweeper,
}
"""Games with an oracle; the others (Sokoban, 2048, LightsOut, FifteenPuzzle) have none."""
