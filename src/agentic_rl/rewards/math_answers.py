"""Verifier of numeric final answers: one answer per reply, compared with ``math-verify``.

The final answer of a reply is the content of its single ``<answer>…</answer>`` tag or, when it
has no answer tag, of its single ``\\boxed{…}``. It is *no* answer (hedging can never be
rewarded) when the reply has several tags, a box outside the tag, several boxes, an unfinished
construct (``<answer>`` without ``</answer>``, a stray ``</answer>``, ``\\boxed{`` without its
closing brace), or a phrase "the answer is" / "answer:" *after* the answer (``\\boxed{12}.
Actually, the answer is …``); or when the answer holds several numbers ("12 or 13", "12, 13",
"[12, 13]", "\\{12, 13\\}"). ``math-verify`` alone would pick the last number of "12 or 13", so
the single-answer check comes first.

Accepted forms of the one number (:func:`plain_number`, measured on the forms small models
emit): integers with thousands separators ("1,234", LaTeX ``1{,}234`` and ``1\\,234``, never a
plain space: "279 280" is two numbers), decimals (".5", "3."), scientific notation ("2.79e2",
``2.79 \\times 10^{2}``, "2.79×10^2"), fractions ("7/2", ``\\frac{7}{2}``, ``\\dfrac``,
``\\tfrac``, ``\\frac72``), a sign (ASCII or the Unicode minus "−"), a currency sign (``$``,
``\\$``, €, £, ¥), a trailing percent (``%``, ``\\%``: "45%" is 45), a trailing period, a leading
"x =" or "Answer:", wrappers (``\\boxed{}``, ``$…$``, ``\\(…\\)``, ``\\[…\\]``, ``(…)``,
``\\left( … \\right)``, ``{…}``) and a unit of up to three words ("279 apples", ``12\\text{ cm}``,
``90^\\circ``; words such as "or", "plus", "thousand" are not a unit). Equality is that of
``math_verify.verify`` (HuggingFace Math-Verify 0.9.0) on the normalised number (see below), so "279.0",
``\\frac{558}{2}`` and "558/2" all equal 279.

Threads and time: math-verify's own timeouts use ``signal.alarm``, which works only on the main
thread (elsewhere every call raised, and a correct answer scored 0), and under load a first
call could take longer than its 5 s alarm. So: when the gold answer is itself a plain number
(every task of ``math-python-v0``), the two numbers are compared here, exactly as math-verify's
numeric rule does (exact, or equal after rounding to :data:`FLOAT_ROUNDING` decimals when
either is a decimal) without sympy, in microseconds; otherwise math-verify is called with its
timeouts off (``parsing_timeout=None``, ``timeout_seconds=None``), which works on any thread.
Its time then depends on the gold expression, which the task sets, not on the model's text:
the answer side is at most :data:`MAX_ANSWER_CHARS` characters with an exponent of at most
:data:`MAX_EXPONENT` (measured under load: at most ~4 s for a 200-digit answer against
``\\sqrt{2}``). A verifier that raises is counted, not hidden: :func:`check_answer` returns the
error in its verdict.

Reference: https://github.com/huggingface/Math-Verify
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

__all__ = [
    "FLOAT_ROUNDING",
    "MAX_ANSWER_CHARS",
    "MAX_EXPONENT",
    "MathVerdict",
    "check_answer",
    "extract_final_answer",
    "plain_number",
    "single_number",
]

#: answers longer than this (characters, after stripping) are not a number: bounds the verifier's time
MAX_ANSWER_CHARS = 200
#: scientific notation beyond 10^±MAX_EXPONENT is not a number (1e999999999 would be a 1 GB string)
MAX_EXPONENT = 100
#: decimals compared after rounding, as math-verify's default ``float_rounding``
FLOAT_ROUNDING = 6

_TAG = re.compile(r"</?answer>")
_BOX = re.compile(r"\\boxed\s*\{")
_LATE_ANSWER = re.compile(
    r"\b(?:the|my)\s+(?:final\s+|correct\s+|real\s+)?answer\s+(?:is|would\s+be|should\s+be)\b"
    r"|\banswer\s*:",
    re.IGNORECASE,
)
_WRAPPERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("(", ")"), ("{", "}"))
_MINUS = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})
_THIN = r"(?:\\,|\\ |~|\u2009|\u202f|\u00a0)"  # LaTeX and Unicode thin / no-break spaces
_TEXT = re.compile(
    r"\\(?:text|textrm|textnormal|mathrm|mbox|textbf|mathbf|textit|operatorname)\s*\{([^{}]*)\}"
)
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_FRAC = re.compile(
    r"\\[dt]?frac\s*(\{\s*[-+]?[0-9]+\s*\}|[0-9])\s*(\{\s*[0-9]+\s*\}|[0-9])(?![0-9])"
)
_SCI = re.compile(
    r"(?<![0-9.,])([0-9][0-9,]*+(?:\.[0-9]++)?)\s*(?:\\times|\\cdot|×|·|\*|x)\s*10\s*(?:\^|\*\*)\s*"
    r"(?:\{\s*([-+]?[0-9]+)\s*\}|([-+]?[0-9]+))"
)
_PREFIX = re.compile(r"^(?:(?:final\s+)?answer\s*[:=]|[A-Za-z]\w{0,15}\s*=)\s*", re.IGNORECASE)
_VALUE = re.compile(
    r"(?P<sign>[-+]?)\s*(?:[$€£¥]\s*)?(?:"
    r"(?P<num>(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE](?P<exp>[-+]?[0-9]+))?"
    r"|(?P<top>[-+]?[0-9]+)\s*/\s*(?P<bottom>[0-9]+))"
    r"\s*(?P<pct>%?)(?P<unit>(?:\s+[A-Za-z]+){0,3})"
)
_NOT_UNITS = {
    "or",
    "and",
    "to",
    "plus",
    "minus",
    "times",
    "over",
    "divided",
    "by",
    "not",
    "maybe",
    "perhaps",
    "point",
    "hundred",
    "thousand",
    "million",
    "billion",
    "trillion",
    "dozen",
    "e",
}


@dataclass(frozen=True)
class MathVerdict:
    """What :func:`check_answer` found.

    Attributes:
        correct: the answer is exactly one number equal to the gold answer.
        error: why the verifier itself failed (math-verify raised, or could not read a side);
            None when it ran. An error always comes with ``correct=False``; count it (e.g. the
            ``verifier_errors`` rubric metric) rather than reading it as a wrong answer.
    """

    correct: bool
    error: str | None = None


def _box_spans(text: str) -> tuple[list[tuple[int, int]], bool]:
    """``(spans of the content of each top-level \\boxed{…}, some box is unfinished)``. Never raises."""
    spans, pos = [], 0
    while (match := _BOX.search(text, pos)) is not None:
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                spans.append((start, i))
                pos = i + 1
                break
        else:
            return spans, True
    return spans, False


def _tag_spans(text: str) -> list[tuple[int, int, int]] | None:
    """``(content start, content end, tag end)`` of each ``<answer>…</answer>``; None if unbalanced."""
    spans, opened = [], -1
    for match in _TAG.finditer(text):
        closing = match.group().startswith("</")
        if closing == (opened < 0):  # a stray </answer>, or <answer> inside <answer>
            return None
        if closing:
            spans.append((opened, match.start(), match.end()))
            opened = -1
        else:
            opened = match.end()
    return None if opened >= 0 else spans


def extract_final_answer(text: str, *, boxed: bool = True) -> str | None:
    """The reply's one final answer (see the module docstring), stripped; None if there is none.

    None when there are several ``<answer>`` tags, a box outside the tag, no tag and zero or
    several ``\\boxed{}``, an unfinished tag or box, an "the answer is" phrase after the answer,
    or the answer is empty. With ``boxed=False`` only the tag is an answer construct (boxes
    outside it are ignored, a box alone is no answer). Never raises.
    """
    tags = _tag_spans(text)
    if tags is None or len(tags) > 1:
        return None
    outside = (
        text[: tags[0][0]] + " " * (tags[0][2] - tags[0][0]) + text[tags[0][2] :] if tags else text
    )
    boxes, unfinished = _box_spans(outside) if boxed else ([], False)
    if unfinished or len(boxes) + len(tags) != 1:
        return None
    start, end = (tags[0][0], tags[0][1]) if tags else boxes[0]
    if _LATE_ANSWER.search(text, tags[0][2] if tags else end + 1):
        return None  # "\boxed{12}. Actually, the answer is ...": a second answer after the first
    return text[start:end].strip() or None


def _unwrap(text: str) -> str:
    """Strip wrappers, trailing periods and a leading "x =" until nothing changes."""
    previous = None
    while text != previous:
        previous = text
        text = text.strip().rstrip(".").strip()
        text = _PREFIX.sub("", text)
        if text.startswith("\\boxed"):
            boxes, unfinished = _box_spans(text)
            if len(boxes) == 1 and not unfinished and boxes[0][1] == len(text) - 1:
                text = text[boxes[0][0] : -1]
                continue
        for left, right in _WRAPPERS:
            if (
                len(text) > len(left) + len(right)
                and text.startswith(left)
                and text.endswith(right)
            ):
                text = text[len(left) : -len(right)]
                break
    return text


def _latex_to_plain(text: str) -> str:
    """Rewrite the LaTeX and Unicode spellings of one number as plain text (see the module docstring)."""
    text = text.translate(_MINUS).replace("{,}", ",").replace("\\%", "%").replace("\\$", "$")
    text = re.sub(rf"(?<=[0-9]){_THIN}(?=[0-9]{{3}})", ",", text)  # 1\,234 -> 1,234
    text = re.sub(rf"{_THIN}|\\[!;:]|\\left\b|\\right\b", " ", text)
    text = _TEXT.sub(lambda m: f" {m.group(1)} ", text)
    text = _DEGREE.sub(" degrees", text)
    text = _FRAC.sub(lambda m: f"{m.group(1).strip('{} ')}/{m.group(2).strip('{} ')}", text)
    return _SCI.sub(lambda m: f"{m.group(1)}e{m.group(2) or m.group(3)}", text)


def plain_number(answer: str | None, *, units: bool = True) -> str | None:
    """The answer's one number as plain text ("-1234.5", "7/2"), or None if it is not exactly one.

    Args:
        answer: an extracted answer (any accepted form of the module docstring), or None.
        units: accept a trailing unit of up to three words ("279 apples"); False rejects words.

    Returns:
        the sign (if any) and digits without separators, currency, percent or unit: a decimal
        (scientific notation expanded, "2.79e2" -> "279") or ``a/b``; None for no number,
        several numbers, a zero denominator, more than :data:`MAX_ANSWER_CHARS` characters or an
        exponent beyond :data:`MAX_EXPONENT`. Never raises.
    """
    if answer is None or len(answer.strip()) > MAX_ANSWER_CHARS:
        return None
    text = _unwrap(_latex_to_plain(_unwrap(answer)))
    match = _VALUE.fullmatch(text)
    if match is None:
        return None
    words = match["unit"].lower().split()
    if words and (not units or any(w in _NOT_UNITS for w in words)):
        return None
    sign = "-" if match["sign"] == "-" else "+" if match["sign"] == "+" else ""
    if match["top"] is not None:
        top, bottom = match["top"], match["bottom"]
        if int(bottom) == 0 or (sign and top[0] in "+-"):
            return None
        return f"{sign}{top}/{bottom}"
    number = match["num"].replace(",", "")
    number = number[:-1] if number.endswith(".") else number
    if match["exp"] is not None:
        if abs(int(match["exp"])) > MAX_EXPONENT:
            return None
        try:
            number = format(Decimal(f"{number}e{match['exp']}").normalize(), "f")
        except InvalidOperation:
            return None
    elif number.startswith("."):
        number = "0" + number
    return sign + number


def single_number(answer: str | None) -> str | None:
    """The answer's one number as text for math-verify, or None: :func:`plain_number` with units."""
    return plain_number(answer, units=True)


def _plain_equal(number: str, gold: str) -> bool:
    """math-verify's equality of two numbers (``sympy_numeric_eq``): exact, or after rounding both
    to :data:`FLOAT_ROUNDING` decimals when either is written as a decimal (so 0.333333 = 1/3)."""
    a, b = Fraction(number), Fraction(gold)
    if a == b:
        return True
    return ("." in number or "." in gold) and round(a, FLOAT_ROUNDING) == round(b, FLOAT_ROUNDING)


def check_answer(answer: str | None, gold: str) -> MathVerdict:
    """Whether ``answer`` is exactly one number equal to ``gold``, by ``math_verify.verify``.

    Safe on any thread (math-verify's signal-based timeouts are off; the time is bounded by the
    size limits of :func:`plain_number`, see the module docstring).

    Args:
        answer: the extracted final answer (see :func:`extract_final_answer`), or None.
        gold: the reference answer, a number in any form math-verify parses (``279``, ``\\frac{1}{3}``).

    Returns:
        a :class:`MathVerdict`; ``error`` is set when math-verify raised or could not read the
        gold answer or the normalised number. Never raises.
    """
    number = single_number(answer)
    if number is None:
        return MathVerdict(False)
    plain_gold = plain_number(gold, units=False)
    if plain_gold is not None:  # two plain numbers: math-verify's rule, without sympy
        return MathVerdict(_plain_equal(number, plain_gold))
    from math_verify import parse, verify

    try:
        gold_parsed = parse(
            f"${gold}$", fallback_mode="no_fallback", parsing_timeout=None, raise_on_error=True
        )
        if not gold_parsed:
            return MathVerdict(False, f"math-verify could not read the gold answer {gold!r}")
        answer_parsed = parse(
            f"${number}$", fallback_mode="no_fallback", parsing_timeout=None, raise_on_error=True
        )
        if not answer_parsed:
            return MathVerdict(False, f"math-verify could not read the number {number!r}")
        return MathVerdict(
            bool(verify(gold_parsed, answer_parsed, timeout_seconds=None, raise_on_error=True))
        )
    except Exception as exc:  # noqa: BLE001 - a verifier failure is reported in the verdict, not raised
        return MathVerdict(False, f"math-verify raised {type(exc).__name__}: {exc}"[:500])
