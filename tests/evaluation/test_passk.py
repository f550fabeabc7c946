import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.evaluation.passk import (
    mean_avg_at_k,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_closed_form,
)


def test_matches_closed_form_on_every_small_case():
    for n in range(1, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(0, n), st.integers(1, n))))
def test_matches_closed_form_for_large_n(case):
    n, c, k = case
    assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_closed_form(n, c, k), abs=1e-9)


def test_hand_computed_values():
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)  # pass@1 = c / n
    assert pass_at_k(4, 2, 3) == 1.0  # any 3 of 4 hold one of the 2 successes


@pytest.mark.parametrize("n,c,k", [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_out_of_range_raises(n, c, k):
    with pytest.raises(ValueError, match="need 0 <= c <= n"):
        pass_at_k(n, c, k)


def test_means_skip_tasks_with_too_few_rollouts():
    counts = [(4, 1), (4, 4), (1, 1)]  # the last task has one scorable rollout
    value, used = mean_pass_at_k(counts, 2)
    assert used == 2
    assert value == pytest.approx((pass_at_k(4, 1, 2) + 1.0) / 2)
    avg, used = mean_avg_at_k(counts, 2)
    assert (avg, used) == (pytest.approx((0.25 + 1.0) / 2), 2)
    assert mean_pass_at_k([(1, 0)], 2) == (None, 0)
