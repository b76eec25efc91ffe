"""Answer verifiers: extract a tagged final answer and compare numbers.

The final-answer format is ``<answer>VALUE</answer>``. Exactly one complete tag must be present: a
reply with several answer tags, an unfinished one (``<answer>12</answer> or <answer>13``, a stray
``</answer>``) or a phrase "the answer is" / "answer:" after the tag scores as having no answer,
so hedging can never be rewarded.

Numbers are read by :func:`agentic_rl.rewards.math_answers.plain_number` without units: the
forms it lists (``1,234``, ``\\frac{7}{2}``, ``−5`` with the Unicode minus, ``2.5 \\times 10^{3}``,
``\\boxed{12}``, "12.", "45%", …) parse; words, several numbers ("12 13", "1,2,3") do not.
"""

from __future__ import annotations

import math
from fractions import Fraction

from agentic_rl.rewards.math_answers import extract_final_answer, plain_number


def extract_answer(text: str) -> str | None:
    """Return the stripped content of the single ``<answer>`` tag, or None.

    None when there is no tag, more than one tag, an unfinished or stray tag, an "the answer
    is" phrase after the tag (see the module docstring), or the tag is empty. Never raises.
    """
    return extract_final_answer(text, boxed=False)


def parse_number(text: str) -> Fraction | None:
    """Parse one plain number ("9716", "-3.5", "1,234", "$42", "7/2", "\\frac{7}{2}"); None if it is not one.

    Thousands separators, a leading ``$`` or a trailing ``.`` or ``%`` are tolerated; words,
    plain-space grouping ("1 000") and several numbers are not. Never raises.
    """
    plain = plain_number(text, units=False)
    return None if plain is None else Fraction(plain)


def numbers_equal(
    answer: str | None, expected: float | int | Fraction, *, rel_tol: float = 1e-6
) -> bool:
    """True when ``answer`` parses to a number equal to ``expected``.

    Integer references must match exactly; non-integer ones within ``rel_tol``.
    """
    if answer is None:
        return False
    value = parse_number(answer)
    if value is None:
        return False
    expected_f = Fraction(expected)
    if value == expected_f:
        return True
    if expected_f.denominator == 1:  # integer answers must match exactly, however large
        return False
    return math.isclose(float(value), float(expected_f), rel_tol=rel_tol, abs_tol=0.0)
