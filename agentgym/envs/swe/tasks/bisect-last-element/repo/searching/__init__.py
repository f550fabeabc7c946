from searching.binary import contains, find_index

__all__ = ["contains", "find_index"]
