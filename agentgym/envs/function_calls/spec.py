"""How a generated function is written down: typed parameters, request templates, samplers.

A :class:`Function` is a function doc in BFCL's JSON shape (``name``, ``description``,
``parameters: {type: "dict", properties, required}``, BFCL's type names) plus what the
generator needs to ask for a call to it: request templates whose ``{param}`` placeholders
say which arguments a request gives, and a sampler per parameter. An optional parameter that a
template does not mention is left to its default, and the ground truth accepts its absence
(``""``) or the default, as BFCL's possible answers do.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Sampler = Callable[[np.random.Generator], Any]
NO_DEFAULT = object()
"""Marks an optional parameter whose doc names no default (its absence is the only other answer)."""


@dataclass(frozen=True)
class Param:
    """One parameter of a generated function.

    Attributes:
        name: The parameter's name.
        type: BFCL's type name: ``integer``, ``float``, ``string``, ``boolean``, ``array``
            or ``dict``.
        description: What it means (the default is appended for optional ones).
        sample: Draws a value.
        required: Whether every call must give it (every template then mentions it).
        default: The default of an optional parameter (:data:`NO_DEFAULT` for none).
        items: The item type of an array.
        enum: The allowed values of a string.
        properties: The fields of a dict, as ``{name: (type, description)}``.
        say: How a value is written in a request (defaults: numbers and strings as they
            are, arrays as "a, b and c").
        accept: The accepted values for a sampled value (defaults to just it); BFCL's checker
            already ignores case, spaces and ``,./-_*^`` in strings.
    """

    name: str
    type: str
    description: str
    sample: Sampler
    required: bool = True
    default: Any = NO_DEFAULT
    items: str | None = None
    enum: tuple[str, ...] | None = None
    properties: tuple[tuple[str, str, str], ...] = ()
    say: Callable[[Any], str] | None = None
    accept: Callable[[Any], list[Any]] | None = None

    def doc(self) -> dict[str, Any]:
        """The parameter's entry in BFCL's ``properties``."""
        text = self.description
        if not self.required and self.default is not NO_DEFAULT:
            text += f" Default is {self.default!r}."
        elif not self.required:
            text += " Optional."
        out: dict[str, Any] = {"type": self.type, "description": text}
        if self.items:
            out["items"] = {"type": self.items}
        if self.enum:
            out["enum"] = list(self.enum)
        if self.properties:
            out["properties"] = {n: {"type": t, "description": d} for n, t, d in self.properties}
        if not self.required and self.default is not NO_DEFAULT:
            out["default"] = self.default
        return out

    def text(self, value: Any) -> str:
        """The value as a request writes it."""
        if self.say is not None:
            return self.say(value)
        if isinstance(value, list):
            return join_words([str(v) for v in value])
        if isinstance(value, float):  # written in full: no exponent, no trailing ".0"
            return str(int(value)) if value.is_integer() else repr(value)
        return str(value)

    def accepted(self, value: Any) -> list[Any]:
        """BFCL's possible-answer list for this parameter.

        Args:
            value: The sampled value, or :data:`NO_DEFAULT` when the request does not give it.
        """
        if value is NO_DEFAULT:
            return [""] if self.default is NO_DEFAULT else ["", self.default]
        if self.accept is not None:
            accepted = self.accept(value)
        elif self.type == "float" and isinstance(value, float) and value.is_integer():
            # the request writes 244.0 as "244" (text()), so the gold call (the first answer)
            # writes it so too; BFCL's Python checker takes an int for a float either way
            accepted = [int(value), value]
        else:
            accepted = [value]
        if not self.required and self.default is not NO_DEFAULT and value == self.default:
            accepted.append("")  # saying the default aloud leaves the call unchanged
        return accepted


@dataclass(frozen=True)
class Function:
    """A function the generator can ask for.

    Attributes:
        name: Its name (may hold dots, which BFCL's FC form serves as ``_``).
        topic: Its domain (distractors and near misses come from the same topic; the
            functions of one topic do different things, so none serves another's request).
        description: What it does.
        params: Its parameters, in doc order.
        templates: Requests for one call, with ``{param}`` placeholders. Every template names
            every required parameter; optional ones appear in some templates only.
        fanout: Requests for several calls at once: one placeholder written ``{param*}``
            lists several values (one call each), the others are shared by all calls.
        valid: Whether a drawn set of arguments makes sense (e.g. two different units);
            the generator draws again until it does.
    """

    name: str
    topic: str
    description: str
    params: tuple[Param, ...]
    templates: tuple[str, ...]
    fanout: tuple[str, ...] = ()
    valid: Callable[[dict[str, Any]], bool] | None = None

    def doc(self) -> dict[str, Any]:
        """The function doc, in BFCL's JSON shape."""
        return {"name": self.name, "description": self.description,
                "parameters": {"type": "dict",
                               "properties": {p.name: p.doc() for p in self.params},
                               "required": [p.name for p in self.params if p.required]}}

    def param(self, name: str) -> Param:
        """The parameter called ``name``."""
        return next(p for p in self.params if p.name == name)


def fields(template: str) -> list[str]:
    """The placeholder names of a template, in order (``{city*}`` gives ``city*``)."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def join_words(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


# -- samplers --------------------------------------------------------------------------------

def pick(*values: Any) -> Sampler:
    """One of ``values``."""
    return lambda rng: values[int(rng.integers(len(values)))]


def ints(lo: int, hi: int, step: int = 1) -> Sampler:
    """An integer in ``[lo, hi]`` on a grid of ``step``."""
    return lambda rng: lo + step * int(rng.integers((hi - lo) // step + 1))


def reals(lo: float, hi: float, step: float) -> Sampler:
    """A float in ``[lo, hi]`` on a grid of ``step`` (rounded, so it is written exactly)."""
    count = round((hi - lo) / step) + 1
    return lambda rng: float(round(lo + step * int(rng.integers(count)), 4))


def some(pool: Sequence[Any], lo: int, hi: int) -> Sampler:
    """``lo`` to ``hi`` distinct items of ``pool``, in drawn order."""
    def draw(rng: np.random.Generator) -> list[Any]:
        count = int(rng.integers(lo, hi + 1))
        return [pool[int(i)] for i in rng.choice(len(pool), count, replace=False)]
    return draw


def series(lo: float, hi: float, step: float, count: tuple[int, int]) -> Sampler:
    """A list of ``count[0]`` to ``count[1]`` floats (repeats allowed), as data."""
    one = reals(lo, hi, step)
    return lambda rng: [one(rng) for _ in range(int(rng.integers(count[0], count[1] + 1)))]


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


def dates(rng: np.random.Generator) -> str:
    """An ISO date in 2025-2027 (days up to the 28th, so every month has them)."""
    return (f"{2025 + int(rng.integers(3))}-{1 + int(rng.integers(12)):02d}-"
            f"{1 + int(rng.integers(28)):02d}")


def say_date(iso: str) -> str:
    """``2026-03-04`` as ``March 4, 2026``."""
    year, month, day = iso.split("-")
    return f"{MONTHS[int(month) - 1]} {int(day)}, {year}"


def accept_date(iso: str) -> list[str]:
    """An ISO date or the way the request wrote it."""
    return [iso, say_date(iso)]


def times(rng: np.random.Generator) -> str:
    """A time of day, ``HH:MM``, on the quarter hour between 07:00 and 19:45."""
    return f"{7 + int(rng.integers(13)):02d}:{15 * int(rng.integers(4)):02d}"


def with_country(places: dict[str, str]) -> Callable[[str], list[str]]:
    """Accept a city alone or with its country, as BFCL's answers often do."""
    return lambda city: [city, f"{city}, {places[city]}"]


CITIES = {"Paris": "France", "Oslo": "Norway", "Lisbon": "Portugal", "Nairobi": "Kenya",
          "Osaka": "Japan", "Toronto": "Canada", "Denver": "USA", "Seattle": "USA",
          "Lima": "Peru", "Cairo": "Egypt", "Hanoi": "Vietnam", "Dublin": "Ireland",
          "Prague": "Czechia", "Santiago": "Chile", "Melbourne": "Australia",
          "Reykjavik": "Iceland", "Marrakesh": "Morocco", "Vienna": "Austria",
          "Buenos Aires": "Argentina", "Mumbai": "India", "Seoul": "South Korea",
          "Helsinki": "Finland", "Accra": "Ghana", "Krakow": "Poland", "Boston": "USA",
          "Vancouver": "Canada", "Athens": "Greece", "Bogota": "Colombia",
          "Edinburgh": "United Kingdom", "Zurich": "Switzerland"}
CITY = pick(*CITIES)
ACCEPT_CITY = with_country(CITIES)
PEOPLE = ("Maya Lindqvist", "Tariq Benali", "Sofia Marchetti", "Kenji Watanabe",
          "Ama Owusu", "Lucas Ferreira", "Ingrid Holm", "Diego Alvarez", "Nora Kowalski",
          "Ravi Menon", "Chloe Dupont", "Samuel Okoro")
TEAMS = ("Riverside Hawks", "Northgate Comets", "Harbor City FC", "Lakeside Wolves",
         "Summit United", "Redwood Rangers", "Granite Bay Bears", "Coastal Tigers")
CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF", "INR", "NOK", "BRL")
INGREDIENTS = ("chickpeas", "spinach", "tomatoes", "rice", "eggs", "mushrooms", "lentils",
               "garlic", "salmon", "tofu", "potatoes", "basil", "lemon", "zucchini")
GENRES = ("jazz", "indie rock", "classical", "hip hop", "folk", "ambient", "soul", "reggae")
