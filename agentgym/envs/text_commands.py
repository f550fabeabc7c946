"""Reading one free-text game command out of a model's reply (ScienceWorld, TextWorldExpress).

Text-world engines take one command a move (``open door to kitchen``). A model's reply may
wrap it: ``<action>open door to kitchen</action>``, a sentence before it, quotes, a trailing
period. :func:`parse_command` takes the command inside the first ``<action>`` tag when there is
one, else the first non-empty line, and strips decoration; the engine itself judges whether
the command means anything.
"""

from __future__ import annotations

import re

MAX_COMMAND_CHARS = 300
"""Longer replies are cut: no command of these engines comes near it, and the engines parse a
command against every object in view, so a huge one only costs time."""

_ACTION_TAG = re.compile(r"<action>(.*?)(?:</action>|$)", re.DOTALL | re.IGNORECASE)
_PREFIX = re.compile(r"^(?:action|command|>)\s*:?\s*", re.IGNORECASE)
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def parse_command(text: str) -> str:
    r"""The command in a reply, as printable ASCII, or ``""`` when the reply holds none.

    Case is kept: object names may hold capitals (``take used Q-tip``).

    Example:
        >>> parse_command("I should look first.\n<action>look around.</action>")
        'look around'
        >>> parse_command("> open door to kitchen")
        'open door to kitchen'
    """
    tagged = _ACTION_TAG.search(text)
    body = tagged.group(1) if tagged else text
    line = next((ln for ln in body.splitlines() if ln.strip()), "")
    line = _PRINTABLE.sub(" ", line[:MAX_COMMAND_CHARS])
    line = _PREFIX.sub("", line.strip()).strip().strip("`'\"*").strip()
    return " ".join(line.rstrip(".!").split())
