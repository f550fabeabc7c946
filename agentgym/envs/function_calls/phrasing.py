"""Varied request phrasing for ``agentgym/FunctionCalls-v0`` (``requests="varied"``).

The plain generator writes each request as one templated sentence and joins several with a
word or a numbered list. People write longer: a greeting before the question, optional
settings stated after it ("Use 3 as the precision."), several asks as "First, ... Second,
... Finally, ..." in one paragraph or several. These helpers write those forms; the calls a
request asks for, and so the ground truth, are the same kind of thing either way: an
optional argument the request states is one the call must give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym.envs.function_calls.spec import Function, Param

OPTIONAL_SHARE = 0.4
"""Chance that a request states an optional argument its template leaves out."""
GREETING_SHARE = 0.3
"""Chance that a single request opens with a greeting or closes with thanks."""
GREETINGS = ("Hi! ", "Quick question: ", "Could you help me with something? ",
             "I need some help. ", "Hello, ")
THANKS = (" Thanks!", " Thank you.", " Thanks in advance.")
ORDINALS = ("First", "Second", "Third", "Fourth", "Fifth")
OPENINGS = ("Can you help me with a few tasks?", "I need several things done.",
            "Could you do the following for me?", "I have a few requests.")


def _stated(p: Param) -> bool:
    """Whether a request can state ``p`` in a generic clause (no custom wording, no flag)."""
    return not p.required and p.say is None and p.type in ("integer", "float", "string",
                                                           "array")


def extra_optionals(fn: Function, named: Sequence[str], rng: np.random.Generator) -> list[str]:
    """Optional parameters, not in ``named``, that the request will state as well."""
    return [p.name for p in fn.params
            if _stated(p) and p.name not in named and rng.random() < OPTIONAL_SHARE]


def state(text: str, settings: Sequence[tuple[Param, Any]], rng: np.random.Generator) -> str:
    """``text`` with a clause stating each ``(param, value)`` of ``settings``."""
    if not settings:
        return text
    said = [(p.name.replace("_", " "), p.text(v)) for p, v in settings]
    style = int(rng.integers(3))
    if style == 0:
        clause = " and ".join(f"{w} {v}" for w, v in said)
        return f"{text.rstrip('.?!')}, with {clause}{text[-1] if text[-1] in '.?!' else '.'}"
    if style == 1:
        return text + " " + " ".join(f"Use {v} as the {w}." for w, v in said)
    return text + " " + " ".join(f"Set the {w} to {v}." for w, v in said)


def courteous(text: str, rng: np.random.Generator) -> str:
    """``text``, sometimes after a greeting or before thanks."""
    if rng.random() < GREETING_SHARE:
        text = GREETINGS[int(rng.integers(len(GREETINGS)))] + text
    if rng.random() < GREETING_SHARE / 2:
        text += THANKS[int(rng.integers(len(THANKS)))]
    return text


def lower_first(text: str) -> str:
    """``text`` with its first word lower-cased, unless it is "I" or a name."""
    word = text.split(" ", 1)[0]
    if word in ("I", "I'm", "I'd") or not word[1:].islower():
        return text
    return text[0].lower() + text[1:]


def enumerate_asks(requests: Sequence[str], rng: np.random.Generator) -> str:
    """Several requests as "First, ... Second, ... Finally, ...", in one paragraph or several."""
    parts = []
    for i, r in enumerate(requests):
        word = "Finally" if i == len(requests) - 1 and i >= 2 else ORDINALS[i]
        parts.append(f"{word}, {lower_first(r)}")
    opening = OPENINGS[int(rng.integers(len(OPENINGS)))]
    gap = " " if rng.random() < 0.5 else "\n\n"
    return opening + gap + gap.join(parts)
