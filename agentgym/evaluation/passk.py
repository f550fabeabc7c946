"""pass@k and avg@k: unbiased estimators from n rollouts per task, c of them successful.

pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1) is the
chance that at least one of k rollouts drawn without replacement from the n succeeds::

    pass@k = E_tasks[ 1 - C(n - c, k) / C(n, k) ]

computed as the numerically stable product ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` (the
paper's own code), exact for large n where the binomials overflow a float.

avg@k is the expected success rate of one of k rollouts, ``E[c / n]``; its unbiased
estimate from n >= k rollouts is ``c / n`` whatever k is (k only says how many rollouts a
task must have to be counted).

Deviation: error rollouts (infrastructure faults) are not failures; they are left out of n
and c, and a task with fewer than k scorable rollouts is left out of the mean (and counted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``n`` rollouts of which ``c`` succeeded.

    Args:
        n: Scorable rollouts of the task.
        c: Successful ones, ``0 <= c <= n``.
        k: Rollouts per attempt, ``1 <= k <= n``.

    Returns:
        ``1 - C(n - c, k) / C(n, k)``.

    Raises:
        ValueError: ``n``, ``c`` or ``k`` out of range.

    Example:
        >>> round(pass_at_k(10, 3, 2), 4)   # 1 - C(7,2)/C(10,2) = 1 - 21/45
        0.5333
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a success
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_closed_form(n: int, c: int, k: int) -> float:
    """``1 - C(n - c, k) / C(n, k)`` with exact integers (for checking; slow for large n)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> tuple[float | None, int]:
    """Mean pass@k over tasks given ``(n, c)`` per task.

    Returns:
        ``(mean, tasks used)``; the mean is None when no task has ``n >= k``.
    """
    values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return (sum(values) / len(values) if values else None), len(values)


def mean_avg_at_k(counts: Iterable[tuple[int, int]], k: int) -> tuple[float | None, int]:
    """Mean avg@k (``c / n`` per task) over tasks with ``n >= k``; ``(mean, tasks used)``."""
    values = [c / n for n, c in counts if n >= k and n > 0]
    return (sum(values) / len(values) if values else None), len(values)
