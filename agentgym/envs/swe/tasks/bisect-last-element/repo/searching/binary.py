"""Binary search over sorted lists."""


def find_index(items, target):
    """Index of ``target`` in the sorted list ``items``, or -1."""
    lo, hi = 0, len(items) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return -1


def contains(items, target):
    return find_index(items, target) != -1
