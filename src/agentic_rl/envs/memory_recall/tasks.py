"""Seeded tasks of ``memory-recall-v0``: a fictional customer's profile and questions about it.

A task is fully determined by its seed: the customer's name, the value of each profile fact,
the order of the questions, the shuffled answer options of each question, and (level
``update``) which fact changes to which new value. Every fact has
:data:`OPTIONS_PER_FACT` possible values, all offered as options, so a guess is right with
probability 1/8 per question.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["FACTS", "LEVELS", "OPTIONS_PER_FACT", "RecallTask", "make_task"]

#: fact key -> (label shown to the policy, the 8 possible values)
FACTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "colour": (
        "favourite colour",
        ("teal", "crimson", "amber", "violet", "olive", "navy", "coral", "ivory"),
    ),
    "codeword": (
        "codeword",
        ("falcon", "otter", "maple", "comet", "harbor", "quartz", "willow", "ember"),
    ),
    "city": ("home city", ("Lyon", "Porto", "Oslo", "Quito", "Perth", "Hanoi", "Tunis", "Lima")),
    "pet": (
        "pet",
        ("parrot", "rabbit", "turtle", "hamster", "ferret", "goldfish", "gecko", "pony"),
    ),
}
OPTIONS_PER_FACT = 8
LEVELS = ("recall", "update")
_FIRST = (
    "Alice",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemi",
    "Lars",
)
_LAST = (
    "Moreau",
    "Silva",
    "Novak",
    "Okafor",
    "Lindqvist",
    "Tanaka",
    "Rossi",
    "Haddad",
    "Kowalski",
    "Mendes",
)


@dataclass(frozen=True)
class RecallTask:
    """One task.

    Attributes:
        seed: the seed that made it.
        level: ``recall`` (reveal, then questions) or ``update`` (reveal, one fact changes, questions).
        customer: the customer's full name.
        profile: ``((fact key, value), ...)`` as revealed in the first session.
        change: ``(fact key, old value, new value)`` for level ``update``, else None.
        questions: fact keys asked, in order (level ``update`` asks the changed fact first).
        options: per question, the 8 values of its fact in a seeded order.
    """

    seed: int
    level: str
    customer: str
    profile: tuple[tuple[str, str], ...]
    change: tuple[str, str, str] | None
    questions: tuple[str, ...]
    options: tuple[tuple[str, ...], ...]

    def answer(self, fact: str) -> str:
        """The current value of ``fact`` (after the change, if any)."""
        if self.change is not None and self.change[0] == fact:
            return self.change[2]
        return dict(self.profile)[fact]


def make_task(seed: int, levels: tuple[str, ...], num_facts: int, num_questions: int) -> RecallTask:
    """The task of ``seed``; its level is ``levels[seed % len(levels)]``.

    Raises:
        ValueError: an empty or unknown level list, ``num_facts`` outside 1..4, or
            ``num_questions`` outside 1..num_facts.
    """
    if isinstance(levels, str) or not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"levels must be a non-empty list drawn from {LEVELS}, got {levels!r}")
    if not 1 <= num_facts <= len(FACTS):
        raise ValueError(f"num_facts must be between 1 and {len(FACTS)}, got {num_facts}")
    if not 1 <= num_questions <= num_facts:
        raise ValueError(
            f"num_questions must be between 1 and num_facts ({num_facts}), got {num_questions}"
        )
    rng = random.Random(f"memory-recall/{seed}")
    level = levels[seed % len(levels)]
    keys = rng.sample(sorted(FACTS), num_facts)
    profile = tuple((k, rng.choice(FACTS[k][1])) for k in keys)
    questions = tuple(rng.sample(keys, num_questions))
    change = None
    if level == "update":
        fact = questions[0]
        old = dict(profile)[fact]
        change = (fact, old, rng.choice([v for v in FACTS[fact][1] if v != old]))
    options = tuple(tuple(rng.sample(FACTS[q][1], OPTIONS_PER_FACT)) for q in questions)
    customer = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    return RecallTask(seed, level, customer, profile, change, questions, options)
