"""The numeric final-answer verifier: one answer per reply, equality through math-verify."""

from __future__ import annotations

import pytest

from agentic_rl.rewards.math_answers import (
    MathVerdict,
    check_answer,
    extract_final_answer,
    single_number,
)


def math_equal(answer, gold) -> bool:
    """``check_answer``'s verdict alone."""
    return check_answer(answer, gold).correct


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so <answer>279</answer>", "279"),
        ("<answer> 279 </answer>", "279"),
        ("the result is \\boxed{279}.", "279"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("<answer>\\boxed{5}</answer>", "\\boxed{5}"),
        (
            "<answer>\\boxed{5}</answer> and \\boxed{6}",
            None,
        ),  # a box outside the tag is a second answer
        ("<answer>1</answer><answer>2</answer>", None),  # two tags
        ("\\boxed{3} or \\boxed{4}", None),  # two boxes
        ("279", None),  # no tag, no box
        ("<answer>  </answer>", None),
    ],
)
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


@pytest.mark.parametrize(
    "answer,number",
    [
        ("279", "279"),
        ("-4", "-4"),
        ("+4", "+4"),
        ("279.50", "279.50"),
        ("1,279", "1279"),
        ("$1,754", "1754"),
        ("€1754", "1754"),
        ("45%", "45"),
        ("279 apples", "279"),
        ("\\boxed{279}", "279"),
        ("$279$", "279"),
        ("\\(3/4\\)", "3/4"),
        ("\\frac{3}{4}", "3/4"),
        ("2.79e2", "279"),
    ],
)
def test_single_number_normalises(answer, number):
    assert single_number(answer) == number


@pytest.mark.parametrize(
    "answer",
    [
        "279 or 280",
        "279, 280",
        "[279, 280]",
        "\\{279, 280\\}",
        "279\n280",
        "12 13",
        "279 + 1",
        "279=279",
        "x",
        "two hundred",
        "(0, 1000)",
        "1,2,3",
        None,
    ],
)
def test_several_or_no_numbers_are_not_an_answer(answer):
    assert single_number(answer) is None
    assert not math_equal(answer, "279")


@pytest.mark.parametrize(
    "answer,gold",
    [
        ("279", "279"),
        ("279.0", "279"),
        ("\\boxed{279}", "279"),
        ("558/2", "279"),
        ("\\frac{558}{2}", "279"),
        ("0.75", "3/4"),
        ("3/4", "0.75"),
        ("\\dfrac{3}{4}", "0.75"),
        ("-1.5E-1", "-0.15"),
        ("1,754", "1754"),
    ],
)
def test_equal_forms_score(answer, gold):
    assert math_equal(answer, gold)


@pytest.mark.parametrize(
    "answer,gold", [("280", "279"), ("0.7", "0.75"), ("-279", "279"), ("27.9", "279")]
)
def test_wrong_numbers_do_not_score(answer, gold):
    assert not math_equal(answer, gold)


# --- issue 19, item 8: math-verify off the main thread -------------------------------------------------------

# answers that only math-verify accepts (no plain-number comparison would): LaTeX gold answers
ONLY_MATH_VERIFY = [
    ("\\boxed{\\frac{1}{3}}", "\\frac{1}{3}"),
    ("2", "\\sqrt{4}"),
    ("0.5", "2^{-1}"),
]


def test_math_verify_scores_correct_answers_on_worker_threads():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    assert all(math_equal(a, g) for a, g in ONLY_MATH_VERIFY)  # the main thread
    with ThreadPoolExecutor(
        max_workers=2
    ) as pool:  # the rollout engine steps envs on worker threads
        assert list(pool.map(lambda case: math_equal(*case), ONLY_MATH_VERIFY)) == [True] * 3
    verdicts = []
    thread = threading.Thread(
        target=lambda: verdicts.extend(check_answer(a, g) for a, g in ONLY_MATH_VERIFY)
    )
    thread.start()
    thread.join(timeout=30)
    assert verdicts == [MathVerdict(True)] * 3  # correct, and no verifier error


def test_verifier_failures_are_reported_not_hidden():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        verdict = pool.submit(
            check_answer, "12", "\\frac{"
        ).result()  # gold math-verify cannot read
    assert not verdict.correct and "could not read the gold answer" in verdict.error
    assert check_answer("13", "12") == MathVerdict(False)  # a wrong answer is no verifier error
    assert check_answer("12 or 13", "12") == MathVerdict(False)  # neither is a malformed one


def test_huge_numbers_are_bounded_not_slow():
    import time

    start = time.perf_counter()
    for answer in ("1e999999999", "9" * 5000, "1/" + "7" * 5000, "1e-999999999"):
        assert single_number(answer) is None and not math_equal(answer, "1")
    assert single_number("1e100") == "1" + "0" * 100 and single_number("1" * 150) == "1" * 150
    assert math_equal("1" * 150, "1" * 150)
    for text in (
        "9" * 199,
        "1," * 99 + "1",
        "(" * 99 + "1" + ")" * 99,
        "x=" * 99,
        "1e" * 99,
        "2\\times 10^" * 15,
        "\\boxed{" * 5000,
        "<answer>" * 5000 + "1" + "</answer>" * 5000,
    ):
        single_number(text), extract_final_answer(text)  # no regex backtracks over long digit runs
    assert time.perf_counter() - start < 2.0


# --- issue 19, item 9: hedged replies --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "so \\boxed{12}. Actually, it is \\boxed{",  # an unfinished box after a complete one
        "\\boxed{12} hmm \\boxed{1",
        "\\boxed{ 12 \\boxed{12}",  # unfinished before a complete one
        "<answer>12</answer> Actually, it is <answer>",  # an unfinished tag after a complete one
        "<answer>12</answer> or <answer>13",
        "<answer>12</answer></answer>",  # a stray closing tag
        "<answer><answer>12</answer></answer>",  # nested tags
        "<answer>12</answer> \\boxed{13}",  # a box outside the tag
        "<answer>12</answer> \\boxed{",
        "\\boxed{12}. Actually, the answer is",  # "the answer is" after the answer
        "\\boxed{12}. Wait, the answer is 13.",
        "<answer>12</answer> My final answer is 13",
        "<answer>12</answer> Answer: 13",
    ],
)
def test_hedged_or_unfinished_second_answer_scores_0(text):
    assert extract_final_answer(text) is None
    assert not math_equal(extract_final_answer(text), "12")


@pytest.mark.parametrize(
    "text",
    [
        "The answer is \\boxed{12}.",  # the phrase before the answer is fine
        "So the answer is <answer>12</answer>",
        "\\boxed{\\boxed{12}}",  # nested boxes are one answer
        "<answer>\\boxed{12}</answer>",
        "$\\boxed{12}$ is the result.",
        "\\boxed {12}",
    ],
)
def test_one_answer_still_scores(text):
    assert math_equal(extract_final_answer(text), "12")


# --- issue 19, item 14: edge forms small models emit --------------------------------------------------------


@pytest.mark.parametrize(
    "answer,number",
    [
        ("\\dfrac{3}{4}", "3/4"),
        ("\\tfrac{3}{4}", "3/4"),
        ("\\frac34", "3/4"),
        ("\\frac{3}4", "3/4"),
        ("-\\frac{1}{2}", "-1/2"),
        ("\\frac{-1}{2}", "-1/2"),
        ("\\left( 12 \\right)", "12"),
        ("\\left(-3\\right)", "-3"),
        ("(12)", "12"),
        ("{12}", "12"),
        ("1,234", "1234"),
        ("1{,}234", "1234"),
        ("1\\,234", "1234"),
        ("1\u2009234", "1234"),
        ("12.", "12"),
        ("12 apples.", "12"),
        ("$12$.", "12"),
        ("3.", "3"),
        (".5", "0.5"),
        ("\u22125", "-5"),
        ("\u2212\\frac{1}{2}", "-1/2"),
        ("\u2013 7", "-7"),
        ("45\\%", "45"),
        ("\\$18", "18"),
        ("18 \\text{ apples}", "18"),
        ("12\\,\\text{cm}", "12"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("90°", "90"),
        ("2.5 \\times 10^{3}", "2500"),
        ("2.5×10^3", "2500"),
        ("2.5 \\cdot 10^{-2}", "0.025"),
        ("6.02e23", "602000000000000000000000"),
        ("x = 12", "12"),
        ("\\boxed{x=12}", "12"),
        ("Answer: 12", "12"),
        ("¥300", "300"),
        ("12 km", "12"),
        ("-$5", "-5"),
    ],
)
def test_edge_forms_normalise(answer, number):
    assert single_number(answer) == number


@pytest.mark.parametrize(
    "answer",
    [
        "279 280",
        "12, 13",
        "12,13",
        "1,2,3",
        "12 or thirteen",
        "12 plus 3",
        "12 thousand",
        "\\frac123",
        "\\frac{1}{0}",
        "1/0",
        "x = 5, y = 6",
        "12 to 13",
        "12-13",
        "",
        "   ",
        "\\boxed{}",
        "e",
        "1e5e5",
        "12cm3",
        "\u0661\u0662",  # Arabic-Indic digits are not read as 12
        "1.2.3",
        "--5",
        "inf",
        "nan",
        "0x10",
        "12 or 13 or 14 or 15",
    ],
)
def test_several_or_odd_numbers_are_not_one_answer(answer):
    assert single_number(answer) is None


@pytest.mark.parametrize(
    "answer,gold",
    [
        ("\\dfrac{1}{3}", "1/3"),
        ("\\frac13", "\\frac{1}{3}"),
        ("\u221212", "-12"),
        ("1{,}234", "1234"),
        ("2.5 \\times 10^{3}", "2500"),
        ("50\\%", "50"),
        ("\\$1,754.50", "1754.5"),
        ("x = 7", "7"),
        ("\\left(\\frac{7}{2}\\right)", "3.5"),
        ("0.5", "\\frac{1}{2}"),
    ],
)
def test_edge_forms_score(answer, gold):
    assert math_equal(answer, gold)
