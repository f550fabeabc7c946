"""Identifier case conversion."""
import re


def camel_to_snake(name):
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def snake_to_camel(name, upper_first=False):
    head, *rest = name.split("_")
    out = head + "".join(part.title() for part in rest)
    return out[:1].upper() + out[1:] if upper_first else out
