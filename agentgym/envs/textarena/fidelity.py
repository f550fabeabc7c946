"""Differential check: the TextArena envs against TextArena's own game loop.

For one (game, seed) and one move policy, two runs:

- **TextArena**: the game's ``-raw`` variant from ``textarena.make``, reset with the seed
  (TextArena's state seeds Python's global generator with it; numpy's global generator, which
  some games also draw from, is seeded with it too, as the env does) and driven the way its
  own loop drives a game: ``get_observation()``, ``step(move)`` until ``done``, then
  ``close()`` for the rewards and the reason. The moves are chosen on this engine as it plays
  (the oracle of :mod:`.experts` reading its state, random moves in the game's format,
  malformed replies), and recorded;
- **agentgym**: ``textarena/<Game>-v0`` made with default kwargs, given the recorded moves,
  all episodes in flight at once up to the rollout default concurrency (the env swaps its own
  saved generator states in around every engine call; this is what that is checked against).

Compared at every step (the reset included) as :class:`~agentgym.fidelity.StepRecord`: the
observation, the reward (None until the game ends, then TextArena's reward for the player),
``terminated``. Documented formatting, applied to TextArena's side: its new messages joined
by blank lines without the echo of the player's move, ``Game over: <reason>`` appended at the
end, and ``(no change)`` for a step that shows nothing.

Run ``python -m agentgym.envs.textarena.fidelity --help``; tests in
``tests/envs/test_fidelity_textarena.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import string
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.envs.textarena.experts import EXPERTS
from agentgym.envs.textarena.games import GAMES
from agentgym.fidelity import Comparison, StepRecord, compare, summarize, summary_line, table
from agentgym.types import Message

FAMILY = "textarena"
MAX_MOVES = 400
"""Moves after which an episode is cut on both sides (2048 has no turn limit of its own)."""
_DIRS = ("up", "down", "left", "right")
RANDOM_MOVES: dict[str, Callable[[random.Random], str]] = {
    "FrozenLake": lambda r: f"[{r.choice(_DIRS)}]",
    "Minesweeper": lambda r: f"[{r.randrange(8)} {r.randrange(8)}]",
    "Sudoku": lambda r: f"[{r.randint(1, 9)} {r.randint(1, 9)} {r.randint(1, 9)}]",
    "TowerOfHanoi": lambda r: "[{} {}]".format(*r.sample("ABC", 2)),
    "GuessTheNumber": lambda r: f"[{r.randint(1, 20)}]",
    "Crosswords": lambda r: f"[{r.randrange(10)} {r.randrange(10)} "
                            f"{r.choice(string.ascii_lowercase)}]",
    "Mastermind": lambda r: "[" + " ".join(map(str, r.sample(range(1, 7), 4))) + "]",
    "Sokoban": lambda r: f"[{r.choice(_DIRS)}]",
    "2048": lambda r: f"[{r.choice(_DIRS)}]",
    "LightsOut": lambda r: f"[{r.randrange(5)} {r.randrange(5)}]",
    "FifteenPuzzle": lambda r: f"[{r.choice(_DIRS)}]",
}
"""A uniformly random move in each game's own format (legal or not in the position)."""
MALFORMED = ("I think I will move now.", "", "[", "move: up", "[]")
"""Replies no game reads as a move."""
POLICIES = ("expert", "mixed", "random")
"""``expert``: the oracle's moves; ``mixed``: the oracle's 70% of the time, else a random or
malformed move (a long reasoning text before the move now and then); ``random``: random
moves in the game's format with malformed ones among them."""


@dataclass(frozen=True)
class Case:
    """One game instance and a move policy."""

    game: str
    seed: int
    policy: str


def policies(game: str) -> tuple[str, ...]:
    """The policies that apply to ``game`` (the oracle ones need an oracle)."""
    return POLICIES if game in EXPERTS else ("random",)


@contextmanager
def _global_generators(seed: int) -> Iterator[None]:
    """Seed Python's and numpy's global generators for one run and restore them after."""
    saved_py, saved_np = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved_py)
        np.random.set_state(saved_np)


def _text(messages: Sequence[Any], kinds: Any) -> str:
    """TextArena's messages as the env documents them: no echo of the move, blank lines."""
    parts = [str(text).strip() for _, text, kind in messages if kind != kinds.PLAYER_ACTION]
    return "\n\n".join(p for p in parts if p)


def _move(case: Case, engine: Any, rng: random.Random) -> str:
    expert = EXPERTS.get(case.game)
    roll = rng.random()
    if expert is not None and (case.policy == "expert" or case.policy == "mixed" and roll < 0.7):
        try:
            return expert(engine)
        except RuntimeError:  # after random moves the oracle may find no way (a stuck box)
            if case.policy == "expert":
                raise
    move = RANDOM_MOVES[case.game](rng) if roll < 0.9 else rng.choice(MALFORMED)
    if rng.random() < 0.1:  # a model that reasons at length before its move
        move = "Let me think about the board. " * 200 + move
    return move


def reference_run(case: Case) -> tuple[list[StepRecord], bool, list[str]]:
    """TextArena's own loop on the case: its steps, its success, and the moves played."""
    import textarena

    kinds = textarena.ObservationType
    rng = random.Random(f"{case.game}:{case.seed}:{case.policy}")
    engine = textarena.make(f"{GAMES[case.game]}-raw")
    records, moves, success = [], [], False
    with _global_generators(case.seed):
        engine.reset(num_players=1, seed=case.seed)
        _, messages = engine.get_observation()
        records.append(StepRecord("(reset)", _text(messages, kinds), None, None, False, False))
        while len(moves) < MAX_MOVES:
            move = _move(case, engine, rng)
            moves.append(move)
            done, _ = engine.step(move)
            _, messages = engine.get_observation()
            text = _text(messages, kinds)
            if not done:
                records.append(StepRecord(move, text or "(no change)", None, None, False, False))
                continue
            rewards, game_info = engine.close()
            reason = str(game_info.get(0, {}).get("reason", ""))
            text = f"{text}\n\nGame over: {reason}" if reason else text
            reward = float(rewards[0])
            records.append(StepRecord(move, text, reward, None, True, False))
            success = reward >= 1.0
            break
    return records, success, moves


async def env_run(case: Case, moves: Sequence[str]) -> tuple[list[StepRecord], bool]:
    """The env at its defaults, given the moves TextArena's run played."""
    import agentgym

    env = agentgym.make(f"textarena/{case.game}-v0")
    records, success = [], False
    try:
        observation, _ = await env.reset(seed=case.seed)
        records.append(StepRecord("(reset)", observation[-1].content, None, None, False, False))
        for move in moves:
            result = await env.step(Message("assistant", move))
            records.append(StepRecord(move, result.observation[-1].content, result.reward, None,
                                      result.terminated, result.truncated))
            if result.done:
                success = bool(result.info.get("success"))
                break
        return records, success
    finally:
        await env.aclose()


def cases(games: Sequence[str], per_game: int, seed: int) -> list[Case]:
    """``per_game`` random seeds of each game, every policy that applies to it."""
    rng = random.Random(seed)
    return [Case(game, rng.randrange(2**31 - 1), policy) for game in games
            for _ in range(per_game) for policy in policies(game)]


async def run(all_cases: Sequence[Case], concurrency: int | None = None) -> list[Comparison]:
    """Both sides of every case; the env side concurrently (default: the rollout default)."""
    from agentgym.rollout import RolloutConfig

    refs = [reference_run(c) for c in all_cases]
    limit = asyncio.Semaphore(concurrency or RolloutConfig().concurrency)

    async def one(case: Case, moves: list[str]) -> tuple[list[StepRecord], bool]:
        async with limit:
            return await env_run(case, moves)

    got = await asyncio.gather(*(one(c, moves) for c, (_, _, moves) in zip(all_cases, refs,
                                                                             strict=True)))
    return [compare(FAMILY, c.game, f"seed {c.seed} [{c.policy}]", ref, ours,
                    reference_success=ref_ok, agentgym_success=our_ok)
            for c, (ref, ref_ok, _), (ours, our_ok) in zip(all_cases, refs, got, strict=True)]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the check, print a table per game, differences, a summary line."""
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.textarena.fidelity",
        description="Play TextArena games through TextArena's own loop and through the "
                    "agentgym envs with the same moves; compare step by step.")
    parser.add_argument("--games", nargs="*", default=list(GAMES), help="games (default: all)")
    parser.add_argument("--per-game", type=int, default=5, help="random seeds per game")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    comparisons = asyncio.run(run(cases(args.games, args.per_game, args.seed)))
    print(table(summarize(comparisons)))
    for c in comparisons:
        if not c.agree:
            print(f"DIFFERS {c.task} {c.episode}: " + "; ".join(map(str, c.mismatches[:3])))
    print(f"{summary_line(FAMILY, comparisons)} ({time.perf_counter() - start:.0f} s)")
    return 0 if all(c.agree for c in comparisons) else 1


if __name__ == "__main__":
    raise SystemExit(main())
