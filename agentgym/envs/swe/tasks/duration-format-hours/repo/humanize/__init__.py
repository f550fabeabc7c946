from humanize.durations import format_duration

__all__ = ["format_duration"]
