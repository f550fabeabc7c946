"""The one statistics module: its intervals, and every user of an interval reads it."""

import math

import pytest

from agentgym.evaluation import compare, report, stats
from agentgym.trainers import heldout


def test_every_reporter_uses_the_one_module():
    assert report.wilson is stats.wilson
    assert compare.newcombe is stats.newcombe and compare.bootstrap_diff is stats.bootstrap_diff
    before, after = [0, 0, 1, 0, 1, 0], [1, 0, 1, 1, 1, 0]
    assert heldout.paired_gain(before, after) == stats.paired_bootstrap(before, after)


def test_paired_bootstrap_resamples_pairs_not_runs():
    """Task difficulty cancels in pairs: the paired interval is narrower than the one that
    resamples each run on its own."""
    before = [0.0, 0.0, 1.0, 0.0, 0.5, 0.0, 0.0, 0.5]
    after = [min(1.0, b + 0.5) for b in before]
    gain, low, high = stats.paired_bootstrap(before, after)
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    assert gain == pytest.approx(sum(diffs) / len(diffs))
    assert low <= gain <= high
    assert stats.bootstrap_diff(before, after)[2] - stats.bootstrap_diff(before, after)[1] \
        > high - low
    with pytest.raises(ValueError, match="same tasks"):
        stats.paired_bootstrap([1.0], [])


def test_seed_t_interval_is_students():
    mean, half = stats.seed_t_interval([0.2, 0.4, 0.6])
    sd = math.sqrt(((0.2 - 0.4) ** 2 + (0.6 - 0.4) ** 2) / 2)
    assert mean == pytest.approx(0.4) and half == pytest.approx(4.303 * sd / math.sqrt(3))
    assert stats.seed_t_interval([0.7]) == (0.7, 0.0)
    assert stats.t_quantile(1) == 12.706 and stats.t_quantile(9) == 2.262
    assert stats.t_quantile(12) == stats.t_quantile(10)  # between entries: the wider one
    assert stats.t_quantile(31) == 1.96
    with pytest.raises(ValueError, match="at least one"):
        stats.seed_t_interval([])
