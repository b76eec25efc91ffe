"""Seeded arithmetic tasks for ``calculator-v0`` in three difficulty levels.

* ``direct``: one product of two 2–4 digit numbers, phrased several ways ("What is 347 * 28?",
  "Multiply 347 by 28.").
* ``multi_op``: an expression with two or three operations among + − × and sometimes
  parentheses, written out ("Compute 23 + 415 * 7 - 96.").
* ``word``: a short word problem whose arithmetic expression the agent must build itself
  ("A box holds 24 pencils. How many pencils are in 137 boxes?").

Every task carries its reference expression and integer answer. Numbers are large enough that
a 135M-parameter model cannot do the arithmetic in its head (measured: 0 of 240 correct on
3-digit × 2-digit products without a tool).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from agentic_rl.tools.definition.calculator import evaluate_arithmetic

LEVELS = ("direct", "multi_op", "word")


@dataclass(frozen=True)
class ArithmeticTask:
    """One task: the question shown, the reference expression and its integer answer."""

    level: str
    question: str
    expression: str
    answer: int


def _num(rng: random.Random, lo_digits: int, hi_digits: int) -> int:
    digits = rng.randint(lo_digits, hi_digits)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def _direct(rng: random.Random) -> tuple[str, str]:
    a, b = _num(rng, 2, 4), _num(rng, 2, 3)
    phrasing = rng.choice(
        [
            "What is {a} * {b}?",
            "What is {a} times {b}?",
            "Calculate {a} * {b}.",
            "Multiply {a} by {b}.",
            "Compute {a} x {b}.",
        ]
    )
    return phrasing.format(a=a, b=b), f"{a} * {b}"


def _multi_op(rng: random.Random) -> tuple[str, str]:
    n_ops = rng.choice([2, 2, 3])
    terms = [str(_num(rng, 1, 3)) for _ in range(n_ops + 1)]
    ops = [rng.choice(["+", "-", "*"]) for _ in range(n_ops)]
    parts = [terms[0]]
    for op, term in zip(ops, terms[1:]):
        parts += [op, term]
    if rng.random() < 0.4:  # parenthesise the first two terms
        parts[0] = "(" + parts[0]
        parts[2] = parts[2] + ")"
    expression = " ".join(parts)
    phrasing = rng.choice(["Compute {e}.", "What is {e}?", "Evaluate {e}.", "Calculate {e}."])
    return phrasing.format(e=expression), expression


def _word(rng: random.Random) -> tuple[str, str]:
    a, b, c = _num(rng, 2, 3), _num(rng, 2, 2), _num(rng, 1, 2)
    templates: list[Callable[[], tuple[str, str]]] = [
        lambda: (f"A box holds {a} pencils. How many pencils are in {b} boxes?", f"{a} * {b}"),
        lambda: (
            f"A train travels {a} km every hour. How many km does it travel in {b} hours?",
            f"{a} * {b}",
        ),
        lambda: (
            f"A farm has {b} rows of {a} apple trees and {c} more trees by the gate. How many trees are there?",
            f"{b} * {a} + {c}",
        ),
        lambda: (
            f"A shop sold {a} shirts on Monday and {b} shirts on Tuesday, at {c} dollars each. "
            "How many dollars did it earn?",
            f"({a} + {b}) * {c}",
        ),
        lambda: (
            f"Each of {b} crates holds {a} bottles, and {c} bottles broke. How many bottles are not broken?",
            f"{b} * {a} - {c}",
        ),
        lambda: (
            f"Sam has {a * c + b * 10} dollars and buys {c} books that cost {a} dollars each. "
            "How many dollars are left?",
            f"{a * c + b * 10} - {c} * {a}",
        ),
        lambda: (
            f"{a * b} students are split into {b} equal teams. How many students are in each team?",
            f"{a * b} / {b}",
        ),
        lambda: (
            f"A printer prints {a} pages per minute. "
            f"How many pages does it print in {b} minutes and then {c} more minutes?",
            f"{a} * ({b} + {c})",
        ),
    ]
    return rng.choice(templates)()


_GENERATORS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "direct": _direct,
    "multi_op": _multi_op,
    "word": _word,
}


def level_for_seed(seed: int, levels: tuple[str, ...]) -> str:
    """The level a seed maps to: ``levels[seed % len(levels)]`` (balanced over consecutive seeds)."""
    return levels[seed % len(levels)]


def make_task(seed: int, levels: tuple[str, ...] = LEVELS) -> ArithmeticTask:
    """Generate the task of a seed (pure function of ``seed`` and ``levels``).

    Raises:
        ValueError: an unknown level name.
    """
    if isinstance(levels, str) or not levels:
        raise ValueError(
            f"levels must be a non-empty list of level names from {list(LEVELS)}, got {levels!r}"
        )
    unknown = [lv for lv in levels if lv not in _GENERATORS]
    if unknown:
        raise ValueError(f"unknown calculator levels {unknown}; known: {list(LEVELS)}")
    level = level_for_seed(seed, levels)
    rng = random.Random(f"calculator-v0/{seed}")
    question, expression = _GENERATORS[level](rng)
    answer = evaluate_arithmetic(expression)
    if not isinstance(answer, int):  # generators only build exact integer tasks
        raise AssertionError(f"non-integer task {expression!r} = {answer!r}")
    return ArithmeticTask(level, question, expression, answer)
