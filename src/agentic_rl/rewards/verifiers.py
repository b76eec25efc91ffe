"""Answer verifiers: extract a tagged final answer and compare numbers.

The final-answer format is ``<answer>VALUE</answer>``. Exactly one tag must be present: a reply
with several answer tags scores as having no answer, so hedging ("<answer>12</answer> or
<answer>13</answer>") can never be rewarded.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def extract_answer(text: str) -> str | None:
    """Return the stripped content of the single ``<answer>`` tag, or None.

    None when there is no tag, more than one tag, or the tag is empty.
    """
    found = _ANSWER.findall(text)
    if len(found) != 1:
        return None
    value = found[0].strip()
    return value or None


def parse_number(text: str) -> Fraction | None:
    """Parse a plain number ("9716", "-3.5", "1,234", "$42", "7/2"); None if it is not one.

    Thousands separators and a leading ``$`` or trailing ``.`` are tolerated; words are not.
    """
    t = text.strip().replace(",", "").replace(" ", "").lstrip("$").rstrip(".")
    if "/" in t:
        num, _, den = t.partition("/")
        if _NUMBER.match(num) and _NUMBER.match(den) and float(den) != 0:
            return Fraction(num) / Fraction(den)
        return None
    if not _NUMBER.match(t):
        return None
    return Fraction(t)


def numbers_equal(answer: str | None, expected: float | int | Fraction, *, rel_tol: float = 1e-6) -> bool:
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
