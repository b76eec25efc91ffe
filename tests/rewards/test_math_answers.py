"""The numeric final-answer verifier: one answer per reply, equality through math-verify."""

from __future__ import annotations

import pytest

from agentic_rl.rewards.math_answers import extract_final_answer, math_equal, single_number


@pytest.mark.parametrize("text,expected", [
    ("so <answer>279</answer>", "279"),
    ("<answer> 279 </answer>", "279"),
    ("the result is \\boxed{279}.", "279"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
    ("<answer>\\boxed{5}</answer> and \\boxed{6}", "\\boxed{5}"),  # the tag wins over boxes
    ("<answer>1</answer><answer>2</answer>", None),  # two tags
    ("\\boxed{3} or \\boxed{4}", None),  # two boxes
    ("279", None),  # no tag, no box
    ("<answer>  </answer>", None),
])
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


@pytest.mark.parametrize("answer,number", [
    ("279", "279"), ("-4", "-4"), ("+4", "+4"), ("279.50", "279.50"), ("1,279", "1279"), ("$1,754", "1754"),
    ("€1754", "1754"), ("45%", "45"), ("279 apples", "279"), ("\\boxed{279}", "279"), ("$279$", "279"),
    ("\\(3/4\\)", "3/4"), ("\\frac{3}{4}", "\\frac{3}{4}"), ("2.79e2", "279"),
])
def test_single_number_normalises(answer, number):
    assert single_number(answer) == number


@pytest.mark.parametrize("answer", [
    "279 or 280", "279, 280", "[279, 280]", "\\{279, 280\\}", "279\n280", "12 13", "279 + 1", "279=279",
    "x", "two hundred", "(0, 1000)", "1,2,3", None,
])
def test_several_or_no_numbers_are_not_an_answer(answer):
    assert single_number(answer) is None
    assert not math_equal(answer, "279")


@pytest.mark.parametrize("answer,gold", [
    ("279", "279"), ("279.0", "279"), ("\\boxed{279}", "279"), ("558/2", "279"), ("\\frac{558}{2}", "279"),
    ("0.75", "3/4"), ("3/4", "0.75"), ("\\dfrac{3}{4}", "0.75"), ("-1.5E-1", "-0.15"), ("1,754", "1754"),
])
def test_equal_forms_score(answer, gold):
    assert math_equal(answer, gold)


@pytest.mark.parametrize("answer,gold", [("280", "279"), ("0.7", "0.75"), ("-279", "279"), ("27.9", "279")])
def test_wrong_numbers_do_not_score(answer, gold):
    assert not math_equal(answer, gold)
