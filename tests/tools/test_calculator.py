"""Tests for agentic_rl.tools.definition.calculator: the safe arithmetic evaluator and the calculator tool."""

from __future__ import annotations

import pytest

from agentic_rl.tools import CalculatorError, calculator, evaluate_arithmetic, execute_tool_calls
from agentic_rl.types import ToolCall


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("2+3*4", 14),  # * binds tighter than +
        ("(2+3)*4", 20),
        ("347*28", 9716),
        ("7/2", 3.5),
        ("2**10", 1024),
        ("2 ** 3 ** 2", 512),  # right-associative: 2 ** 9
        ("-2**2", -4),  # unary minus applies after **
        ("(-2)**2", 4),
        ("2**-2", 0.25),
        ("17 // 5", 3),
        ("-7 // 2", -4),  # floor, not truncation
        ("17 % 5", 2),
        ("-7 % 3", 2),
        ("+5 - -3", 8),
        ("1.5 * 4", 6),  # a whole-number float result is an int
        ("0.1 + 0.2", 0.3),  # exact rational arithmetic
        ("(1/3) * 3", 1),
        ("1/3", 0.3333333333),  # 10 significant digits
        ("2 ** 0.5", 1.414213562),
        ("1e3 + 1", 1001),
        ("1_000 * 3", 3000),
        ("347 × 28", 9716),
        ("6 · 7", 42),
        ("9 ÷ 4", 2.25),
        ("10 − 3", 7),
        ("  (((1 + 2)))\n", 3),
        ("10**100", 10**100),
    ],
)
def test_evaluates(expression, expected):
    result = evaluate_arithmetic(expression)
    assert result == expected
    assert type(result) is type(expected)


def test_exact_division_is_int():
    assert evaluate_arithmetic("6/3") == 2
    assert isinstance(evaluate_arithmetic("6/3"), int)
    assert isinstance(evaluate_arithmetic("7/2"), float)


@pytest.mark.parametrize(
    "expression, fragment",
    [
        ("__import__('os')", "function calls are not allowed"),
        ("abs(1)", "function calls are not allowed"),
        ("a+1", "unknown name 'a'"),
        ("(1).real", "attribute access is not allowed"),
        ("1/0", "division by zero"),
        ("1//0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("9**9**9", "exponent too large"),
        ("2**101", "exponent too large"),
        ("10**99 * 100", "result too large"),
        ("99**99", "result too large"),
        ("1e999", "too large"),
        ("1.5e300 * 1.5e300", "too large"),
        ("(-8) ** (1/3)", "not a real number"),
        ("1,234", "commas are not allowed"),
        ("2^3", "use ** for powers"),
        ("1 < 2", "comparisons are not allowed"),
        ("'a' * 3", "only numbers are allowed"),
        ("True + 1", "only numbers are allowed"),
        ("1j", "only numbers are allowed"),
        ("[1, 2]", "commas are not allowed"),
        ("[1]", "unsupported syntax"),
        ("lambda: 1", "unsupported syntax"),
        ("2 +", "invalid syntax"),
        ("x = 1", "invalid syntax: words are not allowed ('x')"),
        (
            "833 km * 34 hours",
            "words are not allowed ('km', 'hours'); write only numbers and + - * / // % ** ( )",
        ),
        ("a b c d e f g", "words are not allowed ('a', 'b', 'c', 'd', 'e', ...)"),
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("1+" * 100 + "1", "expression too long"),
    ],
)
def test_rejects(expression, fragment):
    with pytest.raises(CalculatorError) as info:
        evaluate_arithmetic(expression)
    assert fragment in str(info.value)


def test_rejects_non_string():
    with pytest.raises(CalculatorError, match="must be a string"):
        evaluate_arithmetic(12)  # type: ignore[arg-type]


def test_calculator_error_is_a_value_error():
    assert issubclass(CalculatorError, ValueError)


def test_calculator_tool_schema_and_call():
    schema = calculator.schema()
    assert schema["name"] == "calculator"
    assert schema["description"] == (
        "Evaluate an arithmetic expression (+ - * / ** and parentheses)."
    )
    assert schema["parameters"]["required"] == ["expression"]
    assert schema["parameters"]["properties"]["expression"]["type"] == "string"
    assert calculator({"expression": "347*28"}) == "9716"
    assert calculator({"expression": "7/2"}) == "3.5"


def test_calculator_errors_become_tool_results():
    calls = [
        ToolCall(name="calculator", arguments={"expression": "1/0"}, id="c0"),
        ToolCall(name="calculator", arguments={"expression": 5}, id="c1"),
    ]
    results = execute_tool_calls(calls, [], {"calculator": calculator})
    assert results[0].content == "Error: CalculatorError: division by zero"
    assert results[1].content == "Error: argument 'expression': expected string, got integer"
    assert not any(r.ok for r in results)
