"""Word problems that need several exact arithmetic steps, generated from a seed.

Each template draws numbers big enough that a small model cannot do the products in its
head, and builds the question, the exact integer answer, and the chain of expressions a
careful solver would type into a calculator (used by the scripted policy and the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Problem:
    """One word problem.

    Attributes:
        question: The text shown to the model.
        answer: The exact integer answer.
        steps: Calculator expressions that solve it, in order; the last evaluates to the answer.
    """

    question: str
    answer: int
    steps: tuple[str, ...]


def _warehouse(r: np.random.Generator) -> Problem:
    crates, per, shipped = r.integers(120, 990), r.integers(12, 96), r.integers(100, 900)
    total = crates * per
    return Problem(
        f"A warehouse holds {crates} crates with {per} items in each crate. A truck takes "
        f"away {shipped} items. How many items are left in the warehouse?",
        int(total - shipped), (f"{crates} * {per}", f"{total} - {shipped}"))


def _tickets(r: np.random.Generator) -> Problem:
    adults, kids = r.integers(110, 870), r.integers(90, 640)
    a_price, k_price = r.integers(13, 59), r.integers(6, 29)
    a_total, k_total = adults * a_price, kids * k_price
    return Problem(
        f"A museum sold {adults} adult tickets at ${a_price} each and {kids} child tickets at "
        f"${k_price} each. How many dollars did it take in?",
        int(a_total + k_total),
        (f"{adults} * {a_price}", f"{kids} * {k_price}", f"{a_total} + {k_total}"))


def _bakery(r: np.random.Generator) -> Problem:
    per_day, days, box = r.integers(140, 960), r.integers(11, 48), r.integers(6, 25)
    total = per_day * days
    return Problem(
        f"A bakery bakes {per_day} cookies a day for {days} days and packs them in boxes of "
        f"{box}. Leftover cookies that do not fill a box are eaten. How many full boxes are "
        "there?",
        int(total // box), (f"{per_day} * {days}", f"{total} // {box}"))


def _savings(r: np.random.Generator) -> Problem:
    weekly, weeks, spent, bonus = (r.integers(37, 480), r.integers(12, 52), r.integers(150, 2900),
                                   r.integers(100, 990))
    saved = weekly * weeks
    return Problem(
        f"Maya saves ${weekly} every week for {weeks} weeks, spends ${spent} on a bike, and "
        f"then receives a ${bonus} bonus. How many dollars does she have now?",
        int(saved - spent + bonus),
        (f"{weekly} * {weeks}", f"{saved} - {spent}", f"{saved - spent} + {bonus}"))


def _garden(r: np.random.Generator) -> Problem:
    rows, per_row, trays, per_tray = (r.integers(23, 180), r.integers(17, 95), r.integers(13, 70),
                                      r.integers(24, 72))
    planted, grown = rows * per_row, trays * per_tray
    return Problem(
        f"A farm has {rows} rows with {per_row} plants each and grows {trays} trays of "
        f"{per_tray} seedlings to plant next. How many more seedlings than planted plants "
        f"are there? (The answer may be negative.)",
        int(grown - planted),
        (f"{rows} * {per_row}", f"{trays} * {per_tray}", f"{grown} - {planted}"))


def _factory(r: np.random.Generator) -> Problem:
    machines, per_hour, hours, defect_per_k = (r.integers(12, 75), r.integers(130, 870),
                                               r.integers(7, 24), r.integers(2, 9))
    made = machines * per_hour * hours
    made -= made % 1000
    defects = made // 1000 * defect_per_k
    return Problem(
        f"A factory made {made} parts last month. For every 1000 parts, {defect_per_k} are "
        f"defective. How many parts were not defective?",
        int(made - defects), (f"{made} / 1000 * {defect_per_k}", f"{made} - {defects}"))


TEMPLATES: tuple[Callable[[np.random.Generator], Problem], ...] = (
    _warehouse, _tickets, _bakery, _savings, _garden, _factory)


def make_problem(rng: np.random.Generator) -> Problem:
    """Draw a template, then its numbers, from ``rng``."""
    return TEMPLATES[int(rng.integers(len(TEMPLATES)))](rng)
