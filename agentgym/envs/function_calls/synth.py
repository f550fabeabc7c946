"""Synthesized functions: thousands of typed signatures composed from a vocabulary.

The curated library (:mod:`.library`) has 55 functions, so a model trained on it alone can
learn those names rather than the skill BFCL asks for: reading a doc it has never seen and
putting the request's values in the parameters whose descriptions they match. This module
composes functions instead: a *subject* (what the function is about: "hotel rooms", "a loan
payment"...) with a verb, 1-4 of the subject's parameter *concepts* (each a typed parameter:
name, BFCL type, description, sampler, and the phrases a request writes its value in), some
of them optional with a default, and a module prefix or none. Request templates are written
from the verb's openers and the concepts' phrases, so a value always appears next to words
that say which parameter it fills, as in BFCL's requests ("... with a radius of 5 ...").

Function ``i`` of a split's pool is a deterministic function of ``i``. A fixed fifth of the
subjects belongs to the ``test`` split only, so held-out tasks ask for functions about things
no training task showed. Every doc is a :class:`~.spec.Function`, so the generator, ground truth
and BFCL's checker treat synthesized and curated functions alike.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.envs.function_calls.spec import (
    ACCEPT_CITY,
    CITIES,
    CITY,
    CURRENCIES,
    GENRES,
    INGREDIENTS,
    NO_DEFAULT,
    PEOPLE,
    Function,
    Param,
    Sampler,
    accept_date,
    dates,
    ints,
    pick,
    reals,
    say_date,
    some,
    times,
)

POOL_SIZE = 3000
"""Draws per split's pool; a signature drawn twice is kept once."""
TEST_EVERY = 5
"""Subject ``i`` (of :data:`SUBJECTS`) belongs to the test split when ``i % TEST_EVERY == 0``."""


@dataclass(frozen=True)
class Concept:
    """A kind of parameter a subject can take.

    Attributes:
        names: Parameter names it may be given (one is drawn per function).
        type: BFCL's type name.
        description: The parameter's description.
        sample: Draws a value.
        phrases: How a request writes the value: ``{v}`` is the value's placeholder.
        items: The item type of an array.
        enum: The allowed values of a string.
        say: How a value is written (as :attr:`.spec.Param.say`).
        accept: Accepted values (as :attr:`.spec.Param.accept`).
        fan: Whether a parallel request may list several values of it (one call each).
    """

    names: tuple[str, ...]
    type: str
    description: str
    sample: Sampler
    phrases: tuple[str, ...]
    items: str | None = None
    enum: tuple[str, ...] | None = None
    say: Callable[[Any], str] | None = None
    accept: Callable[[Any], list[Any]] | None = None
    fan: bool = True


def number(names: tuple[str, ...], type_: str, what: str, sample: Sampler, unit: str = ""
           ) -> Concept:
    """A quantity, written "with a {what} of 12 kg", "for a {what} of 12 kg" or "with {what} 12"."""
    u = f" {unit}" if unit else ""
    return Concept(names, type_, f"The {what}" + (f" in {unit}." if unit else "."), sample,
                   (f"with a {what} of {{v}}{u}", f"for a {what} of {{v}}{u}",
                    f"with {what} {{v}}{u}"))


def choice(names: tuple[str, ...], what: str, values: tuple[str, ...],
           phrases: tuple[str, ...]) -> Concept:
    """A string parameter with an enum."""
    return Concept(names, "string", f"The {what}.", pick(*values), phrases, enum=values,
                   fan=False)


def flag(names: tuple[str, ...], what: str) -> Concept:
    """A boolean: "including {what}" when true, "without {what}" when false."""
    return Concept(names, "boolean", f"Whether to include {what}.", pick(True, False),
                   ("{v}",), say=lambda b: f"including {what}" if b else f"without {what}",
                   fan=False)


COUNTRIES = ("Peru", "Norway", "Kenya", "Japan", "Canada", "Chile", "Ghana", "Portugal",
             "Vietnam", "Iceland", "Morocco", "Finland", "Uruguay", "Nepal", "Austria")
COMPANIES = ("Northwind Traders", "Bluefin Labs", "Alder Systems", "Copperleaf Foods",
             "Helix Motors", "Quarry Media", "Lumen Health", "Tidewater Energy")
LANGUAGES = ("English", "Spanish", "French", "German", "Japanese", "Portuguese", "Swahili")
TOPICS = ("solar power", "urban gardening", "sleep science", "ancient Rome", "jazz history",
          "ocean currents", "chess openings", "bird migration", "3D printing", "tea culture")

C: dict[str, Concept] = {
    "city": Concept(("city", "location", "city_name"), "string", "The city, e.g. 'Lisbon'.",
                    CITY, ("in {v}", "for {v}"), accept=ACCEPT_CITY),
    "origin": Concept(("origin", "from_city", "departure_city"), "string",
                      "The city of departure.", CITY, ("from {v}",), accept=ACCEPT_CITY),
    "destination": Concept(("destination", "to_city", "arrival_city"), "string",
                           "The city of arrival.", CITY, ("to {v}",), accept=ACCEPT_CITY),
    "country": Concept(("country", "country_name"), "string", "The country.",
                       pick(*COUNTRIES), ("in {v}", "for {v}")),
    "person": Concept(("name", "person_name", "full_name"), "string", "The person's full name.",
                      pick(*PEOPLE), ("for {v}", "of {v}")),
    "company": Concept(("company", "company_name", "organization"), "string",
                       "The company's name.", pick(*COMPANIES), ("for {v}", "at {v}")),
    "year": Concept(("year",), "integer", "The year.", ints(1990, 2026),
                    ("in {v}", "for the year {v}")),
    "date": Concept(("date", "on_date", "day"), "string", "The date, format YYYY-MM-DD.",
                    dates, ("on {v}",), say=say_date, accept=accept_date),
    "start_date": Concept(("start_date", "from_date", "check_in"), "string",
                          "The first day, format YYYY-MM-DD.", dates, ("starting {v}",
                                                                      "from {v}"),
                          say=say_date, accept=accept_date),
    "time": Concept(("time", "start_time", "at_time"), "string", "Time of day, HH:MM.",
                    times, ("at {v}",)),
    "limit": Concept(("limit", "max_results", "top_n"), "integer",
                     "How many results to return.", ints(3, 25),
                     ("limited to {v} results", "showing the top {v}")),
    "people": number(("guests", "people", "party_size"), "integer", "number of people",
                     ints(2, 12)),
    "nights": Concept(("nights", "num_nights"), "integer", "Length of the stay in nights.",
                      ints(1, 14), ("for {v} nights",)),
    "days": Concept(("days", "num_days", "duration_days"), "integer", "The number of days.",
                    ints(2, 30), ("for {v} days", "over {v} days")),
    "budget": number(("budget", "max_price", "price_limit"), "float", "budget",
                     reals(50, 2000, 25), "dollars"),
    "amount": number(("amount", "sum", "value"), "float", "amount", reals(10, 10000, 10),
                     "dollars"),
    "rate": number(("rate", "interest_rate", "annual_rate"), "float", "annual rate",
                   reals(0.5, 12, 0.25), "percent"),
    "years": Concept(("years", "term_years", "duration"), "integer", "The term in years.",
                     ints(1, 40), ("over {v} years", "for {v} years")),
    "currency": choice(("currency", "currency_code"), "ISO currency code", CURRENCIES,
                       ("in {v}",)),
    "weight": number(("weight", "weight_kg", "mass"), "float", "weight", reals(0.5, 80, 0.5),
                     "kg"),
    "distance": number(("distance", "distance_km"), "float", "distance", reals(1, 900, 1),
                       "km"),
    "speed": number(("speed", "velocity"), "float", "speed", reals(5, 300, 5), "km/h"),
    "radius": number(("radius", "r"), "float", "radius", reals(0.5, 40, 0.5)),
    "height": number(("height", "h"), "float", "height", reals(1, 60, 0.5)),
    "width": number(("width", "w"), "float", "width", reals(1, 60, 0.5)),
    "length": number(("length", "side_length"), "float", "length", reals(1, 60, 0.5)),
    "base": number(("base", "base_length"), "float", "base", reals(1, 60, 0.5)),
    "temperature": number(("temperature", "temp"), "float", "temperature",
                          reals(-30, 110, 0.5), "degrees"),
    "age": number(("age", "age_years"), "integer", "age", ints(1, 95), "years"),
    "score": number(("score", "points"), "integer", "score", ints(0, 100)),
    "count": number(("count", "quantity", "num_items"), "integer", "quantity", ints(1, 60)),
    "percent": number(("percentage", "percent"), "float", "percentage", reals(1, 60, 0.5),
                      "percent"),
    "minutes": number(("minutes", "duration_minutes"), "integer", "duration", ints(5, 180, 5),
                      "minutes"),
    "numbers": Concept(("numbers", "values", "data"), "array", "The numbers.",
                       lambda rng: [int(x) for x in rng.integers(1, 100, int(rng.integers(3, 7)))],
                       ("of {v}", "for the numbers {v}"), items="integer", fan=False),
    "number": Concept(("n", "number", "x"), "integer", "The number.", ints(2, 500),
                      ("of {v}", "for {v}")),
    "cities": Concept(("cities", "locations"), "array", "The cities.",
                      some(tuple(CITIES), 2, 4),
                      ("for {v}", "across {v}"), items="string", fan=False),
    "ingredients": Concept(("ingredients", "items"), "array", "The ingredients.",
                           some(INGREDIENTS, 2, 4), ("with {v}", "using {v}"), items="string",
                           fan=False),
    "ingredient": Concept(("ingredient", "food"), "string", "The food.", pick(*INGREDIENTS),
                          ("for {v}", "of {v}")),
    "genre": choice(("genre", "style"), "genre", GENRES, ("in the {v} genre", "of {v}")),
    "language": choice(("language", "lang"), "language", LANGUAGES, ("in {v}",)),
    "topic": Concept(("topic", "query", "keyword"), "string", "What to search for.",
                     pick(*TOPICS), ("about {v}", "on {v}")),
    "symbol": Concept(("symbol", "ticker"), "string", "The ticker symbol.",
                      pick("ACME", "GLOBX", "NRTH", "VRDE", "KLMT", "ZYPH", "ORBT", "TIDE"),
                      ("for {v}", "of {v}")),
    "order_id": Concept(("order_id", "order_number"), "string", "The order's id.",
                        lambda rng: f"ORD-{int(rng.integers(10000, 99999))}",
                        ("for order {v}", "with order number {v}")),
    "user_id": Concept(("user_id", "account_id", "customer_id"), "string", "The account's id.",
                       lambda rng: f"U{int(rng.integers(1000, 99999))}",
                       ("for account {v}", "for user {v}")),
    "sort": choice(("sort_by", "order_by"), "sort key", ("price", "rating", "distance",
                                                         "date"), ("sorted by {v}",)),
    "mode": choice(("mode", "travel_mode"), "way of travelling",
                   ("driving", "walking", "cycling", "transit"), ("by {v}", "when {v}")),
    "units": choice(("units", "unit_system"), "unit system", ("metric", "imperial"),
                    ("in {v} units",)),
    "format": choice(("format", "output_format"), "output format", ("json", "csv", "pdf"),
                     ("as {v}", "in {v} format")),
    "room": choice(("room_type", "room"), "room type", ("single", "double", "suite"),
                   ("in a {v} room",)),
    "cuisine": choice(("cuisine", "food_type"), "cuisine",
                      ("italian", "thai", "mexican", "indian", "japanese", "vegan"),
                      ("serving {v} food",)),
    "details": flag(("include_details", "detailed"), "details"),
    "history": flag(("include_history", "with_history"), "past records"),
    "photos": flag(("include_photos", "with_images"), "photos"),
}


@dataclass(frozen=True)
class Subject:
    """What a family of functions is about.

    Attributes:
        words: The noun phrase requests use ("the monthly payment of a loan").
        slug: Its snake-case form in function names.
        module: A module prefix functions may carry.
        verbs: Verbs that fit it (keys of :data:`VERBS`).
        concepts: Concept keys it may take; the first is always taken (the core).
    """

    words: str
    slug: str
    module: str
    verbs: tuple[str, ...]
    concepts: tuple[str, ...]


def s(words: str, slug: str, module: str, verbs: str, concepts: str) -> Subject:
    """A subject, its verbs and concepts written as space-separated keys."""
    return Subject(words, slug, module, tuple(verbs.split()), tuple(concepts.split()))


SUBJECTS: tuple[Subject, ...] = (
    s("hotel rooms", "hotel_rooms", "lodging", "find book", "city start_date nights people "
      "budget room"),
    s("holiday rentals", "holiday_rentals", "lodging", "find book", "city start_date nights "
      "people budget photos"),
    s("flights", "flights", "airline", "find book", "origin destination date people budget"),
    s("train tickets", "train_tickets", "rail", "find book", "origin destination date time "
      "people"),
    s("a rental car", "rental_car", "mobility", "find book", "city start_date days budget"),
    s("a route", "route", "maps", "get plan", "origin destination mode units"),
    s("the travel time", "travel_time", "maps", "get estimate", "origin destination mode"),
    s("restaurants", "restaurants", "dining", "find list", "city cuisine people budget sort "
      "limit"),
    s("a table", "table_booking", "dining", "book", "city date time people"),
    s("the weather forecast", "weather_forecast", "weather", "get", "city days units details"),
    s("the average temperature", "average_temperature", "climate", "get", "city year units"),
    s("the rainfall", "rainfall", "climate", "get", "city year units history"),
    s("the population", "population", "demographics", "get", "city year history"),
    s("the unemployment rate", "unemployment_rate", "economy", "get", "country year history"),
    s("the GDP", "gdp", "economy", "get", "country year currency history"),
    s("the exchange rate", "exchange_rate", "forex", "get", "currency date"),
    s("the stock price", "stock_price", "market", "get", "symbol date history"),
    s("the dividend history", "dividend_history", "market", "get list", "symbol year limit"),
    s("the monthly payment of a loan", "loan_payment", "finance", "calculate estimate",
      "amount rate years"),
    s("the compound interest", "compound_interest", "finance", "calculate",
      "amount rate years"),
    s("the tax owed", "tax_owed", "tax", "calculate estimate", "amount country year"),
    s("the tip", "tip", "finance", "calculate", "amount percent people"),
    s("the area of a circle", "circle_area", "geometry", "calculate", "radius units"),
    s("the area of a rectangle", "rectangle_area", "geometry", "calculate", "width length "
      "units"),
    s("the area of a triangle", "triangle_area", "geometry", "calculate", "base height units"),
    s("the volume of a cylinder", "cylinder_volume", "geometry", "calculate", "radius height "
      "units"),
    s("the volume of a box", "box_volume", "geometry", "calculate", "length width height"),
    s("the travel duration", "trip_duration", "physics", "calculate estimate", "distance "
      "speed"),
    s("the kinetic energy", "kinetic_energy", "physics", "calculate", "weight speed"),
    s("the shipping cost", "shipping_cost", "logistics", "calculate estimate", "weight "
      "distance destination"),
    s("the delivery status", "delivery_status", "logistics", "get check", "order_id details"),
    s("an order", "order", "store", "get cancel", "order_id"),
    s("the order history", "order_history", "store", "get list", "user_id limit sort"),
    s("products", "products", "store", "find list", "topic budget sort limit"),
    s("the account balance", "account_balance", "bank", "get check", "user_id currency "
      "history"),
    s("the factorial", "factorial", "math", "calculate", "number"),
    s("the prime factors", "prime_factors", "math", "calculate find", "number"),
    s("the mean", "mean", "statistics", "calculate", "numbers"),
    s("the median", "median", "statistics", "calculate", "numbers"),
    s("the standard deviation", "standard_deviation", "statistics", "calculate", "numbers"),
    s("the greatest common divisor", "gcd", "math", "calculate find", "numbers"),
    s("the body mass index", "bmi", "health", "calculate", "weight height"),
    s("the daily calorie need", "calorie_need", "health", "calculate estimate", "weight age "
      "height"),
    s("the calories", "calories", "nutrition", "get calculate", "ingredient weight"),
    s("recipes", "recipes", "cooking", "find list", "ingredients cuisine minutes limit"),
    s("books", "books", "library", "find list", "topic language year limit"),
    s("articles", "articles", "news", "find list", "topic date language limit"),
    s("movies", "movies", "cinema", "find list", "genre year language limit"),
    s("showtimes", "showtimes", "cinema", "get list", "city date time"),
    s("concerts", "concerts", "events", "find list", "city genre date budget"),
    s("songs", "songs", "music", "find list", "genre year limit"),
    s("the player statistics", "player_stats", "sports", "get", "person year details"),
    s("the match schedule", "match_schedule", "sports", "get list", "city date limit"),
    s("the salary data", "salary_data", "jobs", "get", "company year currency"),
    s("job openings", "job_openings", "jobs", "find list", "company city limit"),
    s("the employee record", "employee_record", "hr", "get", "person company history"),
    s("the air quality", "air_quality", "environment", "get check", "city date"),
    s("the carbon footprint", "carbon_footprint", "environment", "calculate estimate",
      "distance mode people"),
    s("a translation", "translation", "language", "get", "topic language"),
    s("a report", "report", "analytics", "create", "company year format details"),
    s("an appointment", "appointment", "clinic", "book cancel", "person date time"),
    s("a meeting", "meeting", "calendar", "create book", "person date time minutes"),
    s("the exam results", "exam_results", "school", "get", "person year details"),
    s("the grade average", "grade_average", "school", "calculate", "numbers"),
    s("the time zone", "time_zone", "geo", "get", "city"),
    s("the sunrise time", "sunrise_time", "astronomy", "get", "city date"),
    s("the elevation", "elevation", "geo", "get", "city units"),
    s("hiking trails", "hiking_trails", "outdoors", "find list", "city distance limit sort"),
    s("the property value", "property_value", "housing", "estimate get", "city year "
      "currency"),
    s("the rent prices", "rent_prices", "housing", "get", "city year currency limit"),
)

VERBS: dict[str, tuple[str, tuple[str, ...]]] = {
    # verb: (name prefix, request openers; {s} is the subject's words)
    "find": ("find", ("Find {s}", "Search for {s}", "Look up {s}", "Can you find {s}",
                      "I'm looking for {s}")),
    "list": ("list", ("List {s}", "Show me {s}", "Give me a list of {s}")),
    "book": ("book", ("Book {s}", "Reserve {s}", "Please book {s}", "I want to book {s}")),
    "get": ("get", ("Get {s}", "What is {s}", "Tell me {s}", "Show me {s}",
                    "I need to know {s}", "Retrieve {s}")),
    "calculate": ("calculate", ("Calculate {s}", "Compute {s}", "What is {s}",
                                "Work out {s}", "Can you calculate {s}")),
    "estimate": ("estimate", ("Estimate {s}", "Give me an estimate of {s}",
                              "Roughly what is {s}")),
    "plan": ("plan", ("Plan {s}", "Work out {s}")),
    "check": ("check", ("Check {s}", "Can you check {s}")),
    "cancel": ("cancel", ("Cancel {s}", "Please cancel {s}")),
    "create": ("create", ("Create {s}", "Make {s}", "Set up {s}")),
}
_ARTICLE = re.compile(r"^(the|a|an) ")


def _param(concept: Concept, name: str, required: bool, default: object) -> Param:
    return Param(name, concept.type, concept.description, concept.sample, required=required,
                 default=default, items=concept.items, enum=concept.enum,
                 say=concept.say, accept=concept.accept)


def _template(opener: str, subject: Subject, phrases: list[str]) -> str:
    question = opener.startswith(("What", "Can", "Roughly"))
    text = opener.format(s=subject.words) + "".join(f" {p}" for p in phrases)
    return text + ("?" if question else ".")


def subjects(split: str) -> tuple[Subject, ...]:
    """The subjects of ``split``'s functions (disjoint between the splits)."""
    return tuple(x for i, x in enumerate(SUBJECTS) if (i % TEST_EVERY == 0) == (split == "test"))


def synthesize(split: str, index: int) -> Function:
    """Function ``index`` of ``split``'s pool (deterministic)."""
    rng = np.random.default_rng([7001, int(split == "test"), index])
    options = subjects(split)
    subject = options[int(rng.integers(len(options)))]
    verb = subject.verbs[int(rng.integers(len(subject.verbs)))]
    prefix, openers = VERBS[verb]
    extra = list(subject.concepts[1:])
    rng.shuffle(extra)  # type: ignore[arg-type]
    keys = [subject.concepts[0], *extra[:int(rng.integers(0, min(3, len(extra)) + 1))]]
    params: list[Param] = []
    for i, key in enumerate(keys):
        concept = C[key]
        name = concept.names[int(rng.integers(len(concept.names)))]
        # the core concept is always required; each other one is optional a third of the time
        optional = i > 0 and rng.random() < 1 / 3
        default: object = NO_DEFAULT
        if optional:
            default = concept.enum[0] if concept.enum else (
                False if concept.type == "boolean" else NO_DEFAULT)
        params.append(_param(concept, name, not optional, default))
    phrase = {p.name: C[k].phrases[int(rng.integers(len(C[k].phrases)))]
              for p, k in zip(params, keys, strict=True)}
    required = [p.name for p in params if p.required]
    optional_names = [p.name for p in params if not p.required]
    templates: list[str] = []
    for t in range(3):
        named = required + [n for n in optional_names if t > 0 and rng.random() < 0.6]
        order = [p.name for p in params if p.name in named]
        opener = openers[int(rng.integers(len(openers)))]
        templates.append(_template(opener, subject, [
            phrase[n].replace("{v}", "{" + n + "}") for n in order]))
    fans = [p.name for p, k in zip(params, keys, strict=True) if p.required and C[k].fan]
    fanout: list[str] = []
    if fans:
        star = fans[int(rng.integers(len(fans)))]
        opener = openers[int(rng.integers(len(openers)))]
        fanout.append(_template(opener, subject, [
            phrase[p.name].replace("{v}", "{" + p.name + ("*}" if p.name == star else "}"))
            for p in params if p.required]))
    module = f"{subject.module}." if rng.random() < 0.4 else ""
    suffix = "" if rng.random() < 0.7 else f"_by_{params[-1].name}"
    name = f"{module}{prefix}_{subject.slug}{suffix}"
    labels = ", ".join(p.name for p in params)
    description = (f"{prefix.capitalize()} {_ARTICLE.sub('', subject.words)} "
                   f"given {labels}.")
    # the topic names the subject: functions of one subject do the same job (whatever their
    # verb), those of one module are near misses of each other (:func:`job`, :func:`area`)
    return Function(name, f"{subject.module}/{subject.slug}", description, tuple(params),
                    tuple(templates), tuple(fanout), valid=_valid(params))


def _valid(params: list[Param]) -> Callable[[dict[str, Any]], bool] | None:
    """A :attr:`.spec.Function.valid` check: a trip's two cities differ."""
    names = {p.name for p in params}
    pairs = [(a, b) for a in ("origin", "from_city", "departure_city")
             for b in ("destination", "to_city", "arrival_city") if a in names and b in names]
    if not pairs:
        return None
    return lambda v: all(v.get(a) != v.get(b) for a, b in pairs)


@functools.cache
def bfcl_names() -> frozenset[str]:
    """Every function name of BFCL's single-turn entries, as written and as served, lower-cased.

    A composed name that equals one is renamed or dropped: nothing offered here is BFCL's.
    """
    from agentgym.envs.bfcl import scoring
    from agentgym.envs.bfcl.data import SINGLE_TURN, get_task, task_ids

    return frozenset(n.lower() for c in SINGLE_TURN for i in task_ids(c)
                     for doc in get_task(c, task_id=i).entry["function"]
                     for n in (doc["name"], scoring.served_name(doc["name"])))


def _unlike_bfcl(fn: Function) -> Function | None:
    """``fn``, with its module prefixed when its name is one of BFCL's; None if still so."""
    from agentgym.envs.bfcl import scoring

    taken = bfcl_names()

    def clash(name: str) -> bool:
        return name.lower() in taken or scoring.served_name(name).lower() in taken

    if not clash(fn.name):
        return fn
    if "." not in fn.name:
        renamed = dataclasses.replace(fn, name=f"{area(fn)}.{fn.name}")
        return None if clash(renamed.name) else renamed
    return None


def job(fn: Function) -> str:
    """What ``fn`` does: functions with one job serve the same requests.

    A curated function's job is its own (its name); a synthesized one's (topic
    ``module/subject``) is its subject's, whatever its verb or signature.
    """
    return fn.topic if "/" in fn.topic else fn.name


def area(fn: Function) -> str:
    """A curated function's topic, or a synthesized one's module.

    Functions of one area that do different jobs are near misses of each other.
    """
    return fn.topic.split("/")[0]


@functools.cache
def pool(split: str) -> tuple[Function, ...]:
    """The synthesized functions of ``split``, each signature (name and parameters) once.

    One name may carry different parameters in different functions, so a model must read
    the doc it is offered; the generator never offers two functions of one subject together.
    """
    out: dict[tuple[str, ...], Function] = {}
    for i in range(POOL_SIZE):
        fn = _unlike_bfcl(synthesize(split, i))
        if fn is not None:
            out.setdefault((fn.name, *(p.name for p in fn.params)), fn)
    return tuple(out.values())
