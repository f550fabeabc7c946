"""Human-readable durations."""


def format_duration(seconds):
    if seconds < 0:
        raise ValueError("duration must be >= 0")
    minutes, secs = divmod(int(seconds), 60)
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
