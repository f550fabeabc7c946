"""Number problems that are easy to program and hard to do in one's head, from a seed.

Each template draws its numbers from the generator, computes the exact integer answer here
(plain Python, the same code the expert runs in the interpreter) and returns the program
that solves it, which the scripted policy sends to the ``python`` tool.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CodeProblem:
    """One problem: the question, its integer answer and a program that prints it."""

    question: str
    answer: int
    program: str


def _run(program: str) -> int:
    """The value the program prints (the generator and the expert share the code)."""
    out: list[Any] = []
    exec(program, {"print": out.append})  # noqa: S102 - our own template code
    return int(out[-1])


def _problem(question: str, program: str, answer: int | None = None) -> CodeProblem:
    return CodeProblem(question, _run(program) if answer is None else answer, program)


def _sum_primes(r: np.random.Generator) -> CodeProblem:
    n = int(r.integers(20_000, 100_000))
    return _problem(
        f"What is the sum of all prime numbers below {n}?",
        f"n = {n}\nsieve = bytearray([1]) * n\nsieve[0:2] = b'\\x00\\x00'\n"
        "for i in range(2, int(n ** 0.5) + 1):\n    if sieve[i]:\n"
        "        sieve[i * i::i] = bytearray(len(range(i * i, n, i)))\n"
        "print(sum(i for i in range(n) if sieve[i]))")


def _fib_mod(r: np.random.Generator) -> CodeProblem:
    n, m = int(r.integers(500, 20_000)), int(r.integers(1_000, 100_000))
    return _problem(
        f"Let F(0) = 0, F(1) = 1 and F(k) = F(k-1) + F(k-2). What is F({n}) modulo {m}?",
        f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, (a + b) % {m}\nprint(a)")


def _collatz(r: np.random.Generator) -> CodeProblem:
    n = int(r.integers(100_000, 5_000_000))
    return _problem(
        f"Starting from {n}, repeatedly replace x by x / 2 if x is even and by 3x + 1 if x is "
        "odd. How many replacements does it take to reach 1?",
        f"x, steps = {n}, 0\nwhile x != 1:\n    x = x // 2 if x % 2 == 0 else 3 * x + 1\n"
        "    steps += 1\nprint(steps)")


def _digit_sum_power(r: np.random.Generator) -> CodeProblem:
    base, k = int(r.integers(2, 10)), int(r.integers(100, 1_500))
    return _problem(f"What is the sum of the decimal digits of {base} to the power {k}?",
                    f"print(sum(int(d) for d in str({base} ** {k})))")


def _divisible_count(r: np.random.Generator) -> CodeProblem:
    n = int(r.integers(100_000, 2_000_000))
    a, b, c = (int(x) for x in r.choice([3, 4, 6, 7, 9, 11, 13, 17], size=3, replace=False))
    ab, ac, bc = math.lcm(a, b), math.lcm(a, c), math.lcm(b, c)
    # inclusion-exclusion here; the expert's program counts one by one
    answer = n // a + n // b - n // ab - (n // ac + n // bc - n // math.lcm(a, b, c))
    return _problem(
        f"How many integers from 1 to {n} (inclusive) are divisible by {a} or by {b}, but not "
        f"by {c}?",
        f"print(sum(1 for k in range(1, {n} + 1) if (k % {a} == 0 or k % {b} == 0) "
        f"and k % {c} != 0))", answer)


def _largest_prime_factor(r: np.random.Generator) -> CodeProblem:
    primes = [p for p in range(101, 3_000) if all(p % d for d in range(2, int(p**0.5) + 1))]
    picks = sorted(int(p) for p in r.choice(primes, size=3, replace=False))
    n = picks[0] * picks[1] * picks[2] * int(r.integers(2, 50))
    return _problem(
        f"What is the largest prime factor of {n}?",
        f"n, f, best = {n}, 2, 1\nwhile f * f <= n:\n    while n % f == 0:\n"
        "        best, n = f, n // f\n    f += 1\nprint(max(best, n) if n > 1 else best)")


TEMPLATES: tuple[Callable[[np.random.Generator], CodeProblem], ...] = (
    _sum_primes, _fib_mod, _collatz, _digit_sum_power, _divisible_count, _largest_prime_factor)


def make_problem(rng: np.random.Generator) -> CodeProblem:
    """Draw a template, then its numbers."""
    return TEMPLATES[int(rng.integers(len(TEMPLATES)))](rng)
