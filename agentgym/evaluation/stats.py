"""The intervals agentgym reports, in one place: the CLI, the trainer and the study pages use these.

- :func:`wilson`: a success rate's 95% score interval (Wilson 1927).
- :func:`newcombe`: the difference of two independent success rates, Newcombe's hybrid
  score interval (Newcombe 1998, method 10), built from the two Wilson intervals.
- :func:`bootstrap_diff`: the difference of two independent means, percentile bootstrap.
- :func:`paired_bootstrap`: the mean of paired differences (the same tasks before and
  after), percentile bootstrap over pairs, resampling the pairs' indices once for both.
- :func:`seed_t_interval`: a mean over a few independent seeds, Student's t.

Every bootstrap is seeded, so the same data give the same interval on every run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.96
"""The normal 97.5th percentile."""

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}
"""Student's t 97.5th percentile by degrees of freedom (the standard table)."""


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (Wilson 1927); ``(0, 1)`` when n = 0.

    Example:
        >>> [round(x, 4) for x in wilson(81, 263)]
        [0.2553, 0.3662]
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(successes_a: int, n_a: int, successes_b: int, n_b: int
             ) -> tuple[float, float, float]:
    """``(p_b - p_a, lower, upper)``: Newcombe's hybrid score 95% interval.

    ::

        lower = d - sqrt((p_b - l_b)^2 + (u_a - p_a)^2)
        upper = d + sqrt((u_b - p_b)^2 + (p_a - l_a)^2),    d = p_b - p_a

    Raises:
        ValueError: A run has no episode.
    """
    if n_a == 0 or n_b == 0:
        raise ValueError("both runs need at least one scorable episode")
    pa, pb = successes_a / n_a, successes_b / n_b
    la, ua = wilson(successes_a, n_a)
    lb, ub = wilson(successes_b, n_b)
    d = pb - pa
    return d, d - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2), \
        d + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2)


def bootstrap_diff(a: Sequence[float], b: Sequence[float], resamples: int = 2000,
                   seed: int = 0) -> tuple[float, float, float]:
    """``(mean(b) - mean(a), lower, upper)``: percentile bootstrap 95% interval.

    Each sample is resampled on its own (the two are independent).

    Raises:
        ValueError: A sample is empty.
    """
    if not a or not b:
        raise ValueError("both samples need at least one value")
    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = xa[rng.integers(0, len(xa), (resamples, len(xa)))].mean(axis=1)  # (R,)
    mb = xb[rng.integers(0, len(xb), (resamples, len(xb)))].mean(axis=1)  # (R,)
    low, high = np.percentile(mb - ma, [2.5, 97.5])
    return float(xb.mean() - xa.mean()), float(low), float(high)


def paired_bootstrap(before: Sequence[float], after: Sequence[float], *,
                     resamples: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """``(gain, low, high)``: mean of ``after - before`` and its 95% paired bootstrap interval.

    Percentile bootstrap over pairs (Efron & Tibshirani 1993, ch. 13)::

        gain*_r = mean_{i in I_r}(after_i - before_i),  I_r = n indices drawn with replacement

    Args:
        before: Each task's outcome (0/1, or its share of successes) before.
        after: The same tasks' outcomes after, in the same order.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling.

    Raises:
        ValueError: The two differ in length, or are empty.
    """
    if len(before) != len(after) or not before:
        raise ValueError(f"need the same tasks before and after, got {len(before)} and "
                         f"{len(after)} outcomes")
    diff = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)  # (n,)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (resamples, len(diff)))].mean(axis=1)  # (R,)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)


def t_quantile(df: int) -> float:
    """Student's t 97.5th percentile at ``df`` degrees of freedom.

    The table's value at ``df``, or at the next entry below it (wider, so conservative);
    the normal one past 30.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df > 30:
        return Z95
    return T975[max(k for k in T975 if k <= df)]


def seed_t_interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of a t 95% interval over seeds (0 for one seed).

    Example:
        >>> mean, half = seed_t_interval([0.5, 0.7])
        >>> round(mean, 3), round(half, 3)
        (0.6, 1.271)
    """
    n = len(values)
    if n == 0:
        raise ValueError("need at least one value")
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_quantile(n - 1) * sd / math.sqrt(n)
