from spans.merge import merge_intervals, total_length

__all__ = ["merge_intervals", "total_length"]
