"""ScienceWorld through agentgym against the package's own engine, step by step.

:mod:`agentgym.envs.scienceworld.fidelity` plays each seed's (task, variation) with the
package's ``ScienceWorldEnv`` and its gold path, and with the ``expert`` policy through
``scienceworld/ScienceWorld-v0`` at its defaults, all episodes in flight on the shared JVM
pool; commands, observations, rewards, scores and the end must agree. CI: four task types
(one whose gold path outruns the benchmark's 100-move limit); ``-m sweep``: every task type
on two random variations.
"""

import asyncio

import pytest

pytest.importorskip("scienceworld", reason="install agentgym[scienceworld]")

from agentgym.envs.scienceworld import fidelity, task_names  # noqa: E402
from agentgym.fidelity import summary_line  # noqa: E402

SAMPLE = (9 + 30 * 47, 13 + 30 * 41, 20 + 30 * 7, 27 + 30 * 19)
"""test-conductivity variation 47, whose gold path depends on the engine's history (first:
the reference engine is fresh then); find-plant, lifespan (longest lived), friction with
unnamed surfaces (its gold path is longer than the step limit), each on a variation drawn
once."""


@pytest.mark.slow
def test_a_fixed_sample_agrees_with_the_package_engine():
    cases = fidelity.cases_for(SAMPLE)
    assert [(c.task, c.variation) for c in cases][0] == ("test-conductivity", 47)
    assert [c.task for c in cases][1:] == ["find-plant", "lifespan-longest-lived",
                                           "inclined-plane-friction-unnamed-surfaces"]
    comparisons = asyncio.run(fidelity.run(cases))
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
    assert [c.reference_success for c in comparisons] == [True, True, True, False]
    friction = comparisons[3]
    assert friction.agentgym[-1].truncated and 0 < (friction.agentgym_score or 0) < 100


@pytest.mark.sweep
def test_sweep_every_task_type_on_two_variations_agrees():
    cases = fidelity.cases_for(fidelity.sample_seeds(0, seed=0, variations_per_task=2))
    comparisons = []
    for i in range(0, len(cases), 30):  # a round of every task type at once, two rounds
        comparisons += asyncio.run(fidelity.run(cases[i:i + 30]))
    print(summary_line(fidelity.FAMILY, comparisons))
    assert {c.task for c in comparisons} == set(task_names())
    assert [(c.task, c.episode, [str(m) for m in c.mismatches[:2]])
            for c in comparisons if not c.agree] == []
