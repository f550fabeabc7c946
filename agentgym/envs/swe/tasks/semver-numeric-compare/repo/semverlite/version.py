"""MAJOR.MINOR.PATCH versions."""
from dataclasses import dataclass
from functools import total_ordering


@total_ordering
@dataclass(frozen=True)
class Version:
    parts: tuple

    @classmethod
    def parse(cls, text):
        pieces = text.strip().lstrip("v").split(".")
        if len(pieces) != 3 or not all(p.isdigit() for p in pieces):
            raise ValueError(f"not a MAJOR.MINOR.PATCH version: {text!r}")
        return cls(tuple(pieces))

    def __lt__(self, other):
        return self.parts < other.parts

    def __str__(self):
        return ".".join(str(p) for p in self.parts)


def latest(texts):
    """The highest of the given version strings."""
    return str(max(Version.parse(t) for t in texts))
