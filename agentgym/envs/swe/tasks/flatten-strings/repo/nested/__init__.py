from nested.flat import flatten

__all__ = ["flatten"]
