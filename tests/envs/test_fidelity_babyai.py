"""The BabyAI envs against minigrid's own levels and bot, step by step.

:mod:`agentgym.envs.babyai.fidelity` plays each (level, seed) with minigrid's ``BabyAIBot`` on
the level as ``gymnasium.make`` builds it, and with the ``expert`` policy through
``babyai/<Level>-v0`` at its defaults, all episodes in flight; actions, observations (with
the state under them), rewards and the end must agree. CI: two seeds of every level;
``-m sweep``: ten.
"""

import asyncio

import pytest

pytest.importorskip("minigrid", reason="install agentgym[games]")

from agentgym.envs.babyai import LEVELS, fidelity  # noqa: E402
from agentgym.fidelity import compare, summary_line  # noqa: E402
from agentgym.rollout import RolloutConfig  # noqa: E402


def test_a_fixed_sample_of_every_level_agrees_with_minigrid():
    comparisons = asyncio.run(fidelity.run(fidelity.cases_for(list(LEVELS), 2, seed=20261128)))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
    assert {c.task for c in comparisons} == set(LEVELS)
    assert all(c.reference_success and c.agentgym_success for c in comparisons)


def test_the_check_sees_an_episode_cut_short():
    # BossLevel seed 788 takes the bot 172 of the mission's 1,728 steps; a 100-step cap
    # (what rollouts used to impose) ends agentgym's episode early, and the check says so.
    case = fidelity.Case("BossLevel", 788)
    (trajectory,) = asyncio.run(fidelity.agentgym_run([case]))
    theirs, won = fidelity.reference_run(case)
    assert won and len(theirs) == 1 + 172
    assert fidelity.agentgym_records(trajectory) == theirs

    async def capped():
        import agentgym
        from agentgym.policies.factory import make_agent
        from agentgym.rollout import run_groups

        return await run_groups(lambda: agentgym.make("babyai/BossLevel-v0"),
                                make_agent("expert"), [788], RolloutConfig(max_steps=100))

    (cut,) = asyncio.run(capped())
    comparison = compare(fidelity.FAMILY, "BossLevel", "seed 788", theirs,
                         fidelity.agentgym_records(cut), reference_success=won,
                         agentgym_success=False)
    assert {m.field for m in comparison.mismatches} >= {"steps", "success"}


@pytest.mark.sweep
@pytest.mark.parametrize("level", list(LEVELS))
def test_sweep_ten_seeds_of_every_level_agree(level):
    comparisons = asyncio.run(fidelity.run(fidelity.cases_for([level], 10, seed=0)))
    print(summary_line(fidelity.FAMILY, comparisons))
    assert [(c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
    assert all(c.agentgym_success == c.reference_success for c in comparisons)
