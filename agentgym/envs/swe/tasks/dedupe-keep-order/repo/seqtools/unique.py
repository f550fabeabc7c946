"""Removing duplicates."""


def unique(items):
    """First occurrences, in order."""
    return list(set(items))


def unique_by(items, key):
    """First item for each ``key(item)``, in order."""
    seen, out = set(), []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out
