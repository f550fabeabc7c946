"""URL slugs."""
import re

_UNSAFE = re.compile(r"[^a-z0-9]")


def slugify(title):
    """Lower-case ``title`` and replace everything but letters and digits by hyphens."""
    return _UNSAFE.sub("-", title.strip().lower())
