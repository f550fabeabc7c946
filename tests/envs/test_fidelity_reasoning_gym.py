"""The Reasoning Gym env against Reasoning Gym's own dataset, prompt and scorer.

:mod:`agentgym.envs.reasoning_gym.fidelity` scores gold and perturbed replies with Reasoning
Gym's own pipeline (a freshly built dataset, ``extract_answer``, ``score_answer``) and through
``reasoning-gym/Dataset-v0`` at its defaults with many episodes in flight; prompt, reward,
termination and success must agree. CI: a fixed sample (the datasets with known quirks and a
seeded draw of the others); ``-m sweep``: every dataset, five random entries each.
"""

import asyncio
import random

import pytest

pytest.importorskip("reasoning_gym", reason="install agentgym[games]")

from agentgym.envs.reasoning_gym import fidelity  # noqa: E402

QUIRKS = ["countdown", "puzzle24", "fraction_simplification", "pool_matrix", "list_functions",
          "word_ladder"]
"""Format credit without an answer block; numpy's and Python's global generators; a size
limit: each once made the env part from Reasoning Gym."""


def check(names, per_dataset, seed):
    reference = fidelity.Reference()
    cases = fidelity.cases(names, per_dataset, seed, reference)
    return asyncio.run(fidelity.run(cases, reference))


def test_a_fixed_sample_agrees_with_reasoning_gym():
    others = [d for d in fidelity.datasets() if d not in QUIRKS and d not in fidelity.SLOW]
    names = QUIRKS + random.Random(20261127).sample(others, 8)
    comparisons = check(names, per_dataset=1, seed=20261127)
    assert [(c.task, c.episode, [str(m) for m in c.mismatches])
            for c in comparisons if not c.agree] == []
    assert {c.reference_success for c in comparisons} == {True, False}


@pytest.mark.sweep
@pytest.mark.parametrize("dataset", fidelity.datasets())
def test_sweep_every_dataset_agrees(dataset):
    comparisons = check([dataset], per_dataset=5, seed=0)
    print(fidelity.summary_line(fidelity.FAMILY, comparisons))
    assert [(c.episode, [str(m) for m in c.mismatches]) for c in comparisons if not c.agree] == []
