"""Layered settings."""


def deep_merge(base, override):
    """``base`` updated by ``override``, recursing into nested dicts."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge_into(result[key], value)
        else:
            result[key] = value
    return result


def _merge_into(target, override):
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = value
    return target
