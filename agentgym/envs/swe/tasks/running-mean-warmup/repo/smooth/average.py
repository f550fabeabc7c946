"""Trailing moving averages."""
from collections import deque


def moving_average(values, window):
    if window < 1:
        raise ValueError("window must be >= 1")
    recent, total, out = deque(), 0.0, []
    for v in values:
        recent.append(v)
        total += v
        if len(recent) > window:
            total -= recent.popleft()
        out.append(total / window)
    return out
