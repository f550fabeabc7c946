from seqtools.unique import unique, unique_by

__all__ = ["unique", "unique_by"]
