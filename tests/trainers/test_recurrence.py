"""Step-group recurrence: by hand, and against the groups GiGPO and HGPO actually form."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.trainers.advantages import diagnostics
from agentgym.trainers.advantages.base import flatten
from agentgym.trainers.advantages.diagnostics import (
    recurrence_metrics,
    state_keys,
    step_group_recurrence,
)
from agentgym.trainers.advantages.gigpo import state_clusters
from agentgym.trainers.advantages.hgpo import pair_ids, positions, state_ids

from .test_advantages import error, groups_st, grp, traj


def test_by_hand():
    # group 1: a b a | a c ; group 2: a a (its "a" is not group 1's)
    r = step_group_recurrence([[["a", "b", "a"], ["a", "c"]], [["a", "a"]]], levels=3)
    assert r.steps == 7 and r.states == 4
    # level 1: the three a's of group 1 and both of group 2; level 2: no pair repeats
    # ((a, b), (b, a), (a, c); (a, a) once); level 3: (a, b, a) once
    assert r.grouped == pytest.approx((5 / 7, 0.0, 0.0))
    assert r.across == pytest.approx(3 / 7)  # group 1's a's; group 2 has one rollout
    assert r.revisited == pytest.approx(2 / 7)  # the second a of "a b a" and of "a a"


def test_a_level_needs_the_steps_behind_it():
    # two rollouts that meet at their second step: level 2 groups them, level 3 cannot exist
    r = step_group_recurrence([[["s", "x"], ["s", "x"]]], levels=3)
    assert r.grouped == (1.0, 0.5, 0.0)
    # the same state after different pasts shares level 1 only
    r = step_group_recurrence([[["s", "x"], ["t", "x"]]], levels=2)
    assert r.grouped == (0.5, 0.0) and r.across == 0.5


def test_none_keys_match_nothing_but_count_as_steps():
    r = step_group_recurrence([[[None, "s", None], [None, "s"]]], levels=2)
    assert r.steps == 5 and r.states == 1
    assert r.grouped == (0.4, 0.0)  # the two "s" only; (None, s) windows match nothing
    assert r.across == 0.4 and r.revisited == 0.0


def test_empty_and_bad_levels():
    assert step_group_recurrence([]) == diagnostics.Recurrence(0, 0, (0.0,), 0.0, 0.0)
    assert step_group_recurrence([[[], []]]).steps == 0
    with pytest.raises(ValueError, match="at least 1"):
        step_group_recurrence([[["a"]]], levels=0)


def test_metrics_leave_out_errored_rollouts_and_name_each_level():
    g = grp(traj("a", [0.0, 0.0], ["s0", "s1"]), traj("b", [0.0, 0.0], ["s0", "s1"]),
            error("c"))  # the errored one's "s0" is not scored, so it must not count
    assert state_keys([g]) == [[["s0", "s1"], ["s0", "s1"]]]
    assert recurrence_metrics([g], levels=3) == {
        "credit/step_group_recurrence": 1.0, "credit/step_group_recurrence_k2": 0.5,
        "credit/step_group_recurrence_k3": 0.0, "credit/state_recurrence_across": 1.0,
        "credit/state_revisits": 0.0}
    assert list(recurrence_metrics([g])) == [
        "credit/step_group_recurrence", "credit/state_recurrence_across",
        "credit/state_revisits"]


def _shared(labels: np.ndarray) -> float:
    """Share of entries whose label another entry has."""
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    return float((counts[inverse] >= 2).sum())


@settings(max_examples=150, deadline=None)
@given(groups_st(), st.integers(1, 4))
def test_shares_are_those_of_the_estimators_own_groups(groups, levels):
    """Level 1 is GiGPO's anchor-state clusters; level k is HGPO's level-k groups."""
    flat = flatten(groups, gamma=0.9, invalid_penalty=0.1)
    r = step_group_recurrence(state_keys(groups), levels)
    n = max(len(flat.steps), 1)
    assert r.steps == len(flat.steps)
    assert r.grouped[0] == pytest.approx(_shared(state_clusters(flat)) / n)
    # HGPO's level-k labels, built as hgpo_step_advantages builds them
    pos, state = positions(flat), state_ids(flat)
    idx, label = np.arange(len(state)), state
    for k in range(1, levels + 1):
        if k > 1:
            keep = pos[idx] >= k - 1
            idx = idx[keep]
            label = pair_ids(label[keep], state[idx - (k - 1)])
        expected = _shared(label) / n if len(idx) else 0.0
        assert r.grouped[k - 1] == pytest.approx(expected), k


def test_doctests():
    assert doctest.testmod(diagnostics).failed == 0
