"""The TextWorldExpress envs against the package's own engine, step by step.

:mod:`agentgym.envs.textworld_express.fidelity` plays each (game, seed) with the package's
``TextWorldExpressEnv`` and its gold path, and the same commands through ``twx/<Game>-v0`` at
its defaults, all episodes in flight on the shared JVM pool; observations, rewards, scores and
the end must agree, and the env's own expert must win where the package's gold path does.
CI: one random seed of every game; ``-m sweep``: five of every game, in each split.
"""

import asyncio
from dataclasses import replace

import pytest

pytest.importorskip("textworld_express", reason="install agentgym[textworld-express]")

from agentgym.envs.textworld_express import fidelity, game_names  # noqa: E402
from agentgym.fidelity import compare, summary_line  # noqa: E402


def test_a_fixed_sample_of_every_game_agrees_with_the_package_engine():
    comparisons = asyncio.run(fidelity.run(fidelity.cases_for(game_names(), 1, seed=2026)))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
    assert {c.task for c in comparisons} == set(game_names())
    assert all(c.reference_success and c.agentgym_success for c in comparisons)


def test_the_check_sees_a_different_observation():
    (case,) = fidelity.cases_for(["coin"], 1, seed=1)
    theirs, _ = fidelity.reference_run(case)
    gold = [r.action for r in theirs[1:]]
    (trajectory,) = asyncio.run(fidelity.agentgym_run([case], [gold]))
    ours = fidelity.agentgym_records(trajectory)
    assert ours == theirs
    changed = [*ours[:-1], replace(ours[-1], observation=ours[-1].observation + "!")]
    comparison = compare(fidelity.FAMILY, "coin", "x", theirs, changed,
                         reference_success=True, agentgym_success=True)
    assert [(m.step, m.field) for m in comparison.mismatches] == [(len(ours) - 1,
                                                                   "observation")]


@pytest.mark.sweep
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_sweep_five_seeds_of_every_game_agree(split):
    comparisons = asyncio.run(fidelity.run(fidelity.cases_for(game_names(), 5, seed=0,
                                                              split=split)))
    print(summary_line(fidelity.FAMILY, comparisons))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
