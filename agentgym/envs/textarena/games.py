"""The TextArena single-player games shipped as envs.

Each entry names the TextArena id (its ``-raw`` variant is what runs: no observation
wrappers, so we see each turn's new messages) and whether an oracle move can be read from
the game's own hidden state (see :mod:`.experts`). Left out because they cannot run offline:
Wordle, Hangman and WordSearch (they download NLTK word lists at reset), TwentyQuestions and
GuessWho (they call a hosted LLM).
"""

from __future__ import annotations

GAMES: dict[str, str] = {
    "FrozenLake": "FrozenLake-v0",
    "Minesweeper": "Minesweeper-v0",
    "Sudoku": "Sudoku-v0",
    "TowerOfHanoi": "TowerOfHanoi-v0",
    "GuessTheNumber": "GuessTheNumber-v0",
    "Crosswords": "Crosswords-v0",
    "Mastermind": "Mastermind-v0",
    "Sokoban": "Sokoban-v0",
    "2048": "2048-v0-mega-easy",
    "LightsOut": "LightsOut-v0",
    "FifteenPuzzle": "FifteenPuzzle-v0",
}
"""Our game name -> the TextArena id (``2048`` plays to the 64 tile, TextArena's
``mega-easy`` variant, so that an episode ends within a training budget)."""
