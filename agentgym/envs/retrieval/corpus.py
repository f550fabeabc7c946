"""A generated encyclopedia of a fictional world, and multi-hop questions about it.

Everything comes from one fixed seed, so the corpus is the same on every machine and no
download is needed. Names are made of random syllables, so a model cannot know the answers
and must search. The world has regions, rivers, cities, universities, people and companies
that point at each other; each entity has one article. A question chains two or three
articles ("In which city was the founder of Velor Works born?": the company's article
names the founder, the founder's article names the city), so one search does not answer it.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

import numpy as np

from agentgym.types import ToolCall

WORLD_SEED = 20_260_522
_ONSETS = ("b", "br", "d", "dr", "f", "g", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t",
           "th", "v", "z", "h", "j", "qu")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "ae")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m", "x", "nd")
_INDUSTRIES = ("shipping", "textile", "software", "glassworks", "brewing", "mining", "printing",
               "clockmaking", "shipbuilding", "pharmaceutical", "publishing", "rail")
_JOBS = ("engineer", "chemist", "painter", "historian", "architect", "merchant", "physician",
         "astronomer", "composer", "cartographer", "botanist", "mathematician")


@dataclass(frozen=True)
class Doc:
    """One article: a stable id, a title and its text."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    """A multi-hop question with its answer and the calls that find it."""

    id: str
    question: str
    answer: str
    solution: tuple[ToolCall, ...]
    hops: int


@dataclass
class World:
    """The generated corpus and its questions."""

    docs: dict[str, Doc] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)


class _Names:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.used = rng, set[str]()

    def word(self, syllables: int) -> str:
        while True:
            w = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS)
                        for _ in range(syllables)) + self.rng.choice(_CODAS)
            if w not in self.used:
                self.used.add(w)
                return w.capitalize()


def _slug(kind: str, name: str) -> str:
    return f"{kind}/{name.lower().replace(' ', '-')}"


def build_world(seed: int = WORLD_SEED) -> World:  # noqa: PLR0915 - one linear recipe
    """Generate the world; the same seed gives the same corpus and questions."""
    rng = np.random.default_rng(seed)
    names, world = _Names(rng), World()
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731

    def add(kind: str, name: str, text: str) -> str:
        doc = Doc(_slug(kind, name), name, text)
        world.docs[doc.id] = doc
        return doc.id

    regions = [names.word(2) for _ in range(10)]
    for r in regions:
        add("region", r, f"{r} is a region known for its {pick(_INDUSTRIES)} and its mild "
                         f"winters. Its people speak the {names.word(2)} dialect.")
    rivers = [f"{names.word(2)} River" for _ in range(18)]
    for rv in rivers:
        add("river", rv, f"The {rv} is {int(rng.integers(80, 2400))} km long and rises in the "
                         f"{names.word(2)} Hills. It is used for {pick(_INDUSTRIES)} transport.")
    cities: dict[str, dict[str, str]] = {}
    for _ in range(40):
        c = names.word(int(rng.integers(2, 4)))
        cities[c] = {"region": pick(regions), "river": pick(rivers)}
        add("city", c, f"{c} is a city in the {cities[c]['region']} region, on the banks of "
                       f"the {cities[c]['river']}. About {int(rng.integers(20, 900))} thousand "
                       f"people live there, and its market is famous for {pick(_INDUSTRIES)}.")
    city_names = list(cities)
    unis: dict[str, dict[str, str]] = {}
    for _ in range(16):
        u = f"University of {names.word(2)}"
        unis[u] = {"city": pick(city_names), "year": str(int(rng.integers(1400, 1950)))}
        add("university", u, f"The {u} is a university in {unis[u]['city']}, founded in "
                             f"{unis[u]['year']}. It is best known for {pick(_JOBS)} studies.")
    people: dict[str, dict[str, str]] = {}
    for i in range(180):
        p = f"{names.word(2)} {names.word(int(rng.integers(2, 4)))}"
        people[p] = {"city": pick(city_names), "uni": pick(list(unis)), "job": pick(_JOBS),
                     "mentor": pick(list(people)) if i >= 10 else ""}
    for p, d in people.items():
        mentor = (f" There {p.split()[0]} worked under {d['mentor']}." if d["mentor"] else "")
        article = "an" if d["job"][0] in "aeiou" else "a"
        add("person", p, f"{p} is {article} {d['job']} born in {d['city']} in "
                         f"{int(rng.integers(1850, 1990))}. {p.split()[0]} studied at the "
                         f"{d['uni']}.{mentor} Later work took {p.split()[0]} to "
                         f"{pick(city_names)} and {pick(city_names)}.")
    founders = list(people)[10:]
    rng.shuffle(founders)
    companies: dict[str, dict[str, str]] = {}
    for i in range(70):
        co = f"{names.word(2)} {pick(('Works', 'Company', 'Group', 'Industries', 'Trading'))}"
        companies[co] = {"founder": founders[i], "city": pick(city_names)}
        add("company", co, f"{co} is a {pick(_INDUSTRIES)} company founded in "
                           f"{int(rng.integers(1880, 2010))} by {founders[i]}. Its headquarters "
                           f"are in {companies[co]['city']}, and it has offices in "
                           f"{pick(city_names)}.")

    def q(kind: str, text: str, answer: str, path: list[tuple[str, str]]) -> None:
        calls = tuple(ToolCall(f"call_{i}", tool, {"query": arg} if tool == "search"
                               else {"doc_id": arg}) for i, (tool, arg) in enumerate(path))
        qid = hashlib.sha1(text.encode()).hexdigest()[:10]
        world.questions.append(Question(f"{kind}-{qid}", text, answer, calls,
                                        sum(t == "open" for t, _ in path)))

    for co, d in companies.items():
        f = d["founder"]
        q("founder-birthplace", f"In which city was the founder of {co} born?",
          people[f]["city"], [("search", co), ("open", _slug("company", co)),
                              ("open", _slug("person", f))])
        q("hq-river", f"Which river flows through the city where {co} has its headquarters?",
          cities[d["city"]]["river"], [("search", co), ("open", _slug("company", co)),
                                       ("open", _slug("city", d["city"]))])
        q("founder-university-year", f"In what year was the university attended by the "
          f"founder of {co} founded?", unis[people[f]["uni"]]["year"],
          [("search", co), ("open", _slug("company", co)), ("open", _slug("person", f)),
           ("open", _slug("university", people[f]["uni"]))])
        if people[f]["mentor"]:
            q("founder-mentor-job", f"What is the profession of the person under whom the "
              f"founder of {co} worked?", people[people[f]["mentor"]]["job"],
              [("search", co), ("open", _slug("company", co)), ("open", _slug("person", f)),
               ("open", _slug("person", people[f]["mentor"]))])
    for p, d in list(people.items())[::3]:
        q("university-region", f"In which region is the university that {p} attended?",
          cities[unis[d["uni"]]["city"]]["region"],
          [("search", p), ("open", _slug("person", p)), ("open", _slug("university", d["uni"])),
           ("open", _slug("city", unis[d["uni"]]["city"]))])
    return world


@functools.cache
def world() -> World:
    """The shared, read-only world (built once per process, ~20 ms)."""
    return build_world()


def split_questions(split: str) -> list[Question]:
    """A fixed, disjoint 80/20 train/test split of the questions, by question id."""
    def is_test(question: Question) -> bool:
        return int(hashlib.sha1(question.id.encode()).hexdigest()[:8], 16) % 5 == 0

    return [x for x in world().questions if is_test(x) == (split == "test")]
