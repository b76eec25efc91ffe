"""Answer verifiers: one <answer> tag, plain numbers, numeric equality."""

from __future__ import annotations

from fractions import Fraction

import pytest

from agentic_rl.rewards import extract_answer, numbers_equal, parse_number


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<answer>42</answer>", "42"),
        ("So the result is <answer> 9716 </answer>.", "9716"),
        ("<answer>\n-3.5\n</answer>", "-3.5"),  # DOTALL: content may span lines
        ("<answer>forty two</answer>", "forty two"),  # extraction does not judge the content
        ("no tag at all", None),
        ("", None),
        ("<answer>12</answer> or <answer>13</answer>", None),  # hedging: two tags -> no answer
        ("<answer>12</answer><answer>12</answer>", None),  # even when they agree
        ("<answer></answer>", None),
        ("<answer>   </answer>", None),
        ("<answer>12", None),  # unclosed
        ("12</answer>", None),
        ("<ANSWER>12</ANSWER>", None),  # tags are case-sensitive
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("9716", Fraction(9716)),
        ("-3.5", Fraction(-7, 2)),
        ("+7", Fraction(7)),
        ("1,234", Fraction(1234)),
        ("1,234,567", Fraction(1234567)),
        ("$42", Fraction(42)),
        ("42.", Fraction(42)),
        ("3.", Fraction(3)),
        (".5", Fraction(1, 2)),
        ("7/2", Fraction(7, 2)),
        ("-6/4", Fraction(-3, 2)),
        ("1e3", Fraction(1000)),
        ("2.5E-1", Fraction(1, 4)),
        ("  12  ", Fraction(12)),
        ("1 000", None),  # a plain space is no thousands separator: "279 280" is two numbers
        ("0.1", Fraction(1, 10)),  # exact decimal, not the float 0.1
        ("", None),
        (".", None),
        ("forty", None),
        ("12abc", None),
        ("1/0", None),
        ("1/", None),
        ("--5", None),
        ("1.2.3", None),
        ("0x10", None),
        ("inf", None),
        ("nan", None),
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    "answer, expected, equal",
    [
        ("9716", 9716, True),
        ("9716.0", 9716, True),
        ("9,716", 9716, True),
        ("$9716", 9716, True),
        ("9717", 9716, False),
        ("3.5", 3.5, True),
        ("7/2", 3.5, True),
        ("7/2", Fraction(7, 2), True),
        ("0.3333333333", Fraction(1, 3), True),  # |diff| / (1/3) = 1e-10 < rel_tol 1e-6
        ("0.333", Fraction(1, 3), False),  # relative error 1e-3
        ("-12", 12, False),
        ("0", 0, True),
        ("0.0000001", 0, False),  # no absolute tolerance around 0
        (None, 1, False),
        ("abc", 1, False),
    ],
)
def test_numbers_equal(answer, expected, equal):
    assert numbers_equal(answer, expected) is equal


def test_numbers_equal_rel_tol_argument():
    # rel_tol applies to non-integer references only: |101 - 100.5| / 100.5 = 0.5% <= 2%,
    # |103 - 100.5| / 100.5 = 2.5% > 2%
    assert numbers_equal("101", 100.5, rel_tol=0.02)
    assert not numbers_equal("103", 100.5, rel_tol=0.02)
    assert not numbers_equal("101", 100, rel_tol=0.02)  # integer reference: exact


def test_integers_compare_exactly():
    assert not numbers_equal("1000000", 1000001)
    assert not numbers_equal("9989000", 9989001)


# --- issue 19, items 9 and 14: hedged replies and edge forms of the tag-only verifier -----------------------


@pytest.mark.parametrize(
    "text",
    [
        "<answer>12</answer> Actually, it is <answer>",  # an unfinished tag after a complete one
        "<answer>12</answer> or <answer>13",
        "<answer>12</answer></answer>",  # a stray closing tag
        "<answer><answer>12</answer></answer>",
        "<answer>12</answer> Wait, the answer is 13.",  # a second answer in words after the tag
        "<answer>12</answer> answer: 13",
    ],
)
def test_hedged_or_unfinished_second_tag_is_no_answer(text):
    assert extract_answer(text) is None
    assert not numbers_equal(extract_answer(text), 12)


def test_the_tag_alone_is_the_format():
    assert extract_answer("\\boxed{12}") is None  # a box is not this verifier's format
    assert extract_answer("<answer>12</answer> \\boxed{13}") == "12"  # nor an answer construct
    assert extract_answer("The answer is <answer>12</answer>.") == "12"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\u22125", Fraction(-5)),  # Unicode minus
        ("\u2212 3.5", Fraction(-7, 2)),
        ("\\frac{7}{2}", Fraction(7, 2)),
        ("\\dfrac{7}{2}", Fraction(7, 2)),
        ("\\frac72", Fraction(7, 2)),
        ("-\\frac{1}{4}", Fraction(-1, 4)),
        ("\\left( 12 \\right)", Fraction(12)),
        ("\\boxed{12}", Fraction(12)),
        ("$12$", Fraction(12)),
        ("1{,}234", Fraction(1234)),
        ("1\\,234", Fraction(1234)),
        ("2.5 \\times 10^{3}", Fraction(2500)),
        ("2.5e3", Fraction(2500)),
        ("12%", Fraction(12)),
        ("12\\%", Fraction(12)),
        ("\\$42", Fraction(42)),
        ("x = 12", Fraction(12)),
        ("12 13", None),
        ("1,2,3", None),
        ("12,13", None),
        ("279 280", None),  # several numbers, not one
        ("42 apples", None),  # words are not tolerated here
        ("1e999999999", None),
        ("9" * 5000, None),  # too large: no 10**999999999, no int-digits ValueError
    ],
)
def test_parse_number_edge_forms(text, expected):
    assert parse_number(text) == expected
