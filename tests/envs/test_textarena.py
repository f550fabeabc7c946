"""TextArena single-player games: oracle replays reach TextArena's win; its scores pass through."""

from __future__ import annotations

import random

import numpy as np
import pytest

import agentgym
from agentgym import ConfigError, Message
from agentgym.envs.textarena import EXPERTS, GAMES, TextArenaEnv


async def play_expert(env: TextArenaEnv, seed: int) -> tuple[float, int]:
    await env.reset(seed=seed)
    for steps in range(1, 500):
        result = await env.step(env.expert_action())
        assert result.valid, result.observation[0].content
        if result.done:
            assert result.info["success"] is (result.reward == 1.0)
            assert result.info["benchmark"].startswith("textarena 0.")
            return result.reward, steps
        assert result.reward is None  # TextArena scores only the end of a game
    raise AssertionError("the game did not end")


@pytest.mark.parametrize("game", sorted(EXPERTS))
async def test_the_oracle_wins_through_the_env(game: str) -> None:
    env = TextArenaEnv(game)
    for seed in range(3):
        reward, _ = await play_expert(env, seed)
        assert reward == 1.0, f"{game} seed {seed}"


@pytest.mark.sweep
@pytest.mark.parametrize("game", sorted(EXPERTS))
async def test_the_oracle_wins_100_seeds(game: str) -> None:
    env = TextArenaEnv(game)
    assert [(await play_expert(env, s))[0] for s in range(100)] == [1.0] * 100


@pytest.mark.parametrize("game", sorted(GAMES))
async def test_two_rejected_moves_end_the_game_with_textarenas_score(game: str) -> None:
    env = TextArenaEnv(game)
    await env.reset(seed=0)
    first = await env.step(Message("assistant", "I am not sure."))
    assert not first.valid and not first.done and first.reward is None
    assert "invalid move" in first.observation[0].content
    second = await env.step(Message("assistant", "still not sure"))
    assert not second.valid and second.terminated and second.info["success"] is False
    assert 0.0 <= second.reward < 1.0 and second.info["reason"].startswith("Invalid Move")


async def test_falling_into_a_hole_ends_with_textarenas_partial_score() -> None:
    env = TextArenaEnv("FrozenLake")
    for seed in range(100):  # the first seed whose start has a hole to its right or below
        await env.reset(seed=seed)
        grid = env.engine.state.game_state["grid"]
        move = "right" if grid[0][1] == "H" else "down" if grid[1][0] == "H" else None
        if move is not None:
            break
    result = await env.step(Message("assistant", f"[{move}]"))
    assert result.terminated and result.valid and not result.info["success"]
    assert 0.0 <= result.reward < 1.0 and "hole" in result.info["reason"]


async def test_concurrent_episodes_do_not_share_randomness() -> None:
    alone = TextArenaEnv("2048")
    await alone.reset(seed=5)
    solo = [(await alone.step(Message("assistant", f"[{d}]"))).observation[0].content
            for d in ("up", "left", "down", "right")]
    a, b = TextArenaEnv("2048"), TextArenaEnv("2048")
    await a.reset(seed=5)
    await b.reset(seed=6)
    mixed = []
    for d in ("up", "left", "down", "right"):  # interleave a second game's moves
        mixed.append((await a.step(Message("assistant", f"[{d}]"))).observation[0].content)
        await b.step(Message("assistant", f"[{d}]"))
        random.random(), np.random.random()  # other code drawing from the global generators
    assert mixed == solo


async def test_state_key_and_render_follow_the_game_state() -> None:
    env = TextArenaEnv("TowerOfHanoi")
    _, info = await env.reset(seed=0)
    start = info["state_key"]
    assert start.startswith("textarena-TowerOfHanoi-seed0|")
    moved = await env.step(Message("assistant", "[A C]"))
    back = await env.step(Message("assistant", "[C A]"))
    assert moved.info["state_key"] != start and back.info["state_key"] == start
    assert "A: [3, 2, 1]" in env.render()


async def test_same_seed_same_game_and_versions_recorded() -> None:
    a, b = TextArenaEnv("Sudoku"), TextArenaEnv("Sudoku")
    assert await a.reset(seed=3) == await b.reset(seed=3)
    _, info = await a.reset(seed=3)
    assert info["textarena_version"] and info["game"] == "Sudoku"


def test_unknown_game_suggests_a_near_name() -> None:
    with pytest.raises(ConfigError, match="did you mean 'Sudoku'"):
        TextArenaEnv("Sodoku")


async def test_expert_raises_for_games_without_an_oracle() -> None:
    env = TextArenaEnv("FifteenPuzzle")
    await env.reset(seed=0)
    with pytest.raises(RuntimeError, match="no expert"):
        env.expert_action()


async def test_passes_the_contract_checker_with_the_oracles_moves() -> None:
    probe = TextArenaEnv("TowerOfHanoi")
    await probe.reset(seed=0)
    moves = []
    while True:
        moves.append(probe.expert_action())
        if (await probe.step(moves[-1])).done:
            break
    ran = await agentgym.check_env(agentgym.make("textarena/TowerOfHanoi-v0"), actions=moves)
    assert "determinism" in ran


def test_registered_games_match_the_family_list() -> None:
    ids = {i.split("/")[1].removesuffix("-v0") for i in agentgym.registry
           if i.startswith("textarena/")}
    assert ids == set(GAMES)


async def test_a_long_reasoning_before_the_move_reaches_the_game() -> None:
    """TextArena reads the whole reply; a model that reasons for pages still moves."""
    env = TextArenaEnv("FrozenLake")
    await env.reset(seed=3)
    move = env.expert_action().content
    result = await env.step(Message("assistant", "Let me think about the board. " * 300 + move))
    assert result.valid, result.observation[0].content
    assert "You moved" in result.observation[0].content
