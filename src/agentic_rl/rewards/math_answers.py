"""Verifier of numeric final answers: one answer per reply, compared with ``math-verify``.

The final answer of a reply is the content of its single ``<answer>…</answer>`` tag or, when it
has no answer tag, of its single ``\\boxed{…}``. Several tags, several boxes, or several numbers
in the answer ("12 or 13", "12, 13", "[12, 13]", "\\{12, 13\\}") are *no* answer: hedging can
never be rewarded. (``math-verify`` alone would pick the last number of "12 or 13", so the
single-answer check comes first.)

Accepted forms of the one number (checked by :func:`single_number`): integers with or without
thousands separators ("1,234"), decimals, scientific notation, plain fractions ("7/2"), LaTeX
fractions (``\\frac{7}{2}``, ``\\dfrac``), an optional sign, currency sign or trailing percent,
optionally wrapped in ``\\boxed{}``, ``$…$``, ``\\(…\\)`` or ``\\[…\\]``, and optionally
followed by a unit of up to three words ("279 apples"). Equality is decided by
``math_verify.verify`` (HuggingFace Math-Verify) on the normalised number, so "279.0",
"\\frac{558}{2}" and "558/2" all equal 279.

Reference: https://github.com/huggingface/Math-Verify
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["extract_final_answer", "single_number", "math_equal"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOX = re.compile(r"\\boxed\s*\{")
_WRAPPERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_NUM = r"[-+]?\s*[$€£]?\s*(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?\s*%?"
_FRAC = r"[-+]?\s*(?:\d+\s*/\s*\d+|\\[dt]?frac\s*\{\s*-?\d+\s*\}\s*\{\s*\d+\s*\})"
_UNIT = r"(?:\s+[A-Za-z]+){0,3}"
_SINGLE = re.compile(rf"^(?:{_FRAC}|{_NUM}){_UNIT}$")


def _boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{…}`` (balanced braces). Never raises."""
    found = []
    for match in _BOX.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                found.append(text[start:i])
                break
    return found


def extract_final_answer(text: str) -> str | None:
    """The reply's one final answer (see the module docstring), stripped; None if there is none.

    None when there are several ``<answer>`` tags, or no tag and zero or several ``\\boxed{}``,
    or the answer is empty. Never raises.
    """
    tags = _ANSWER.findall(text)
    if len(tags) > 1:
        return None
    if len(tags) == 1:
        value = tags[0].strip()
    else:
        boxes = _boxed_contents(text)
        if len(boxes) != 1:
            return None
        value = boxes[0].strip()
    return value or None


def _unwrap(answer: str) -> str:
    text = answer.strip()
    changed = True
    while changed:
        changed = False
        boxes = _boxed_contents(text)
        if len(boxes) == 1 and text.startswith("\\boxed") and text.endswith("}"):
            text, changed = boxes[0].strip(), True
        for left, right in _WRAPPERS:
            if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text, changed = text[len(left):-len(right)].strip(), True
    return text


def single_number(answer: str | None) -> str | None:
    """The answer's one number as text for math-verify, or None if it is not exactly one number.

    Strips wrappers, a currency sign, thousands separators, a trailing percent and a unit.
    Never raises.
    """
    if answer is None:
        return None
    text = _unwrap(answer)
    if not _SINGLE.match(text):
        return None
    text = re.sub(r"(?:\s+[A-Za-z]+){1,3}$", "", text)  # the unit
    text = re.sub(r"[$€£\s]", "", text)
    if re.fullmatch(r"[-+]?(?:\d{1,3}(?:,\d{3})+)(?:\.\d+)?%?", text):
        text = text.replace(",", "")
    text = text.rstrip("%")
    if re.search(r"[eE]", text):  # math-verify does not read 2.79e2
        text = format(Decimal(text), "f")
    return text


def math_equal(answer: str | None, gold: str) -> bool:
    """True when ``answer`` is exactly one number equal to ``gold`` (``math_verify.verify``).

    Args:
        answer: the extracted final answer (see :func:`extract_final_answer`), or None.
        gold: the reference answer, a number in any form math-verify parses.

    Never raises (a parse failure is a wrong answer).
    """
    number = single_number(answer)
    if number is None:
        return False
    from math_verify import parse, verify

    try:
        gold_parsed = parse(f"${gold}$")
        answer_parsed = parse(f"${number}$")
        return bool(gold_parsed and answer_parsed and verify(gold_parsed, answer_parsed))
    except Exception:  # noqa: BLE001 - math-verify may raise on odd input: that is a wrong answer
        return False
