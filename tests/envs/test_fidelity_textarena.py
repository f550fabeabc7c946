"""The TextArena envs against TextArena's own game loop, step by step.

:mod:`agentgym.envs.textarena.fidelity` plays each game on TextArena's engine (oracle moves,
random moves in the game's format, malformed replies, long reasoning before a move) and replays
the same moves through ``textarena/<Game>-v0`` at its defaults with many episodes in flight;
observations, rewards, the end and success must agree. CI: two seeds per game and policy;
``-m sweep``: a hundred.
"""

import asyncio

import pytest

pytest.importorskip("textarena", reason="install agentgym[games]")

from agentgym.envs.textarena import GAMES, fidelity  # noqa: E402


def test_a_fixed_sample_of_every_game_agrees_with_textarena():
    comparisons = asyncio.run(fidelity.run(fidelity.cases(list(GAMES), 2, seed=20261127)))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
    assert {c.task for c in comparisons} == set(GAMES)
    assert {c.reference_success for c in comparisons} == {True, False}
    assert all(c.agentgym_success for c in comparisons if c.episode.endswith("[expert]"))


@pytest.mark.sweep
@pytest.mark.parametrize("game", list(GAMES))
def test_sweep_a_hundred_seeds_of_every_game_agree(game):
    comparisons = asyncio.run(fidelity.run(fidelity.cases([game], 100, seed=0)))
    print(fidelity.summary_line(fidelity.FAMILY, comparisons))
    assert [(c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
