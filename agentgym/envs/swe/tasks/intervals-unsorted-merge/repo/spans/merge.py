"""Closed integer intervals (start, end)."""


def merge_intervals(intervals):
    """Merge overlapping intervals; input in any order, output sorted and disjoint."""
    merged = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals):
    """Length covered by the union of ``intervals``."""
    return sum(end - start for start, end in merge_intervals(intervals))
