"""A safe arithmetic calculator: an AST walker over a tiny expression language, never ``eval``.

Grammar accepted (Python syntax, parsed with ``ast.parse(mode="eval")``):

- int and float literals (``12``, ``3.5``, ``1e3``, ``1_000``);
- binary ``+ - * / // % **``, unary ``+ -``, parentheses;
- the symbols ``×`` and ``·`` for ``*``, ``÷`` for ``/`` and ``−`` (U+2212) for ``-``.

Everything else is rejected with :class:`CalculatorError`: names, calls, attributes,
comparisons, strings, commas (``1,234`` is ambiguous: thousands separator or tuple?), ``^``.

Arithmetic is exact on rationals (:class:`fractions.Fraction`), so ``0.1 + 0.2`` is ``0.3``
and ``6 / 3`` is the int ``2``. Only a power with a non-integer exponent goes through float.
The result is an ``int`` when it is a whole number, else a ``float`` rounded to 10
significant digits.

Limits (so that a policy cannot make the environment hang): at most 200 characters,
``|exponent| <= 100``, and every intermediate value's magnitude at most ``1e100``.
"""

from __future__ import annotations

import ast
import math
import re
from fractions import Fraction

from agentic_rl.tools.definition.tool import tool

__all__ = [
    "CalculatorError",
    "evaluate_arithmetic",
    "calculator",
    "MAX_EXPRESSION_CHARS",
    "MAX_EXPONENT",
    "MAX_MAGNITUDE",
]

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 100
MAX_MAGNITUDE = 10**100
SIGNIFICANT_DIGITS = 10

_SYMBOLS = {"×": "*", "·": "*", "÷": "/", "−": "-"}
_OPERATORS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
_BAD_OPERATORS = {
    ast.BitXor: "^ (use ** for powers)",
    ast.MatMult: "@",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.Invert: "~",
    ast.Not: "not",
}

Number = Fraction | float


class CalculatorError(ValueError):
    """The expression is not valid arithmetic or cannot be evaluated within the limits.

    The message says what is wrong and is meant to be shown to the policy.
    """


def _check_size(value: Number) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result too large")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"result too large (limit is 1e{len(str(MAX_MAGNITUDE)) - 1})")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent too large (|exponent| must be <= {MAX_EXPONENT})")
    if abs(base) > 1 and exponent > 0 and float(exponent) * math.log10(abs(base)) > 101:
        raise CalculatorError("result too large (limit is 1e100)")
    if float(exponent).is_integer():
        return base ** int(exponent)  # exact for a Fraction base; 0 ** -n: ZeroDivisionError
    if base < 0:
        raise CalculatorError("a negative number to a fractional power is not a real number")
    return float(base) ** float(exponent)


def _binary(op: ast.operator, left: Number, right: Number) -> Number:
    if isinstance(left, float) or isinstance(right, float):
        left, right = float(left), float(right)
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    if isinstance(op, ast.Div):
        return left / right
    if isinstance(op, ast.FloorDiv):
        return left // right
    if isinstance(op, ast.Mod):
        return left % right
    return _power(left, right)


def _evaluate(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise CalculatorError("number too large")
        return _check_size(Fraction(repr(value)) if isinstance(value, float) else Fraction(value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        operand = _evaluate(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        try:
            return _check_size(_binary(node.op, left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("result too large") from None
    raise CalculatorError(_describe(node))


def _describe(node: ast.AST) -> str:
    """Message for a node outside the grammar."""
    op = getattr(node, "op", None)
    if op is not None and type(op) in _BAD_OPERATORS:
        return f"unsupported operator {_BAD_OPERATORS[type(op)]}"
    if isinstance(node, ast.Name):
        return f"unknown name '{node.id}': only numbers and + - * / // % ** ( ) are allowed"
    if isinstance(node, ast.Call):
        return "function calls are not allowed: only numbers and + - * / // % ** ( )"
    if isinstance(node, ast.Attribute):
        return "attribute access is not allowed: only numbers and + - * / // % ** ( )"
    if isinstance(node, ast.Compare):
        return "comparisons are not allowed"
    return f"unsupported syntax ({type(node).__name__}): only numbers and + - * / // % ** ( )"


def _to_result(value: Number) -> int | float:
    if isinstance(value, Fraction) and value.denominator == 1:
        return int(value)
    rounded = float(f"{float(value):.{SIGNIFICANT_DIGITS}g}")
    if rounded.is_integer() and abs(rounded) < 2**53:
        return int(rounded)
    return rounded


def evaluate_arithmetic(expression: str) -> int | float:
    """Evaluate an arithmetic expression safely (grammar and limits: module docstring).

    Args:
        expression: e.g. ``"(2 + 3) * 4"`` or ``"347 × 28"``.

    Returns:
        An ``int`` when the result is a whole number (``6/3`` -> ``2``), else a ``float``
        rounded to 10 significant digits (``7/2`` -> ``3.5``).

    Raises:
        CalculatorError: not a string, empty, longer than 200 characters, contains a comma,
            a syntax error, anything outside the grammar (names, calls, attributes, ...),
            division by zero, ``|exponent| > 100``, a magnitude above 1e100, or a negative
            number raised to a fractional power.
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"expression too long ({len(expression)} chars, limit {MAX_EXPRESSION_CHARS})"
        )
    for symbol, replacement in _SYMBOLS.items():
        expression = expression.replace(symbol, replacement)
    expression = expression.strip()
    if not expression:
        raise CalculatorError("empty expression")
    if "," in expression:
        raise CalculatorError("commas are not allowed: write 1234, not 1,234")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError) as exc:
        words = list(dict.fromkeys(re.findall(r"[A-Za-z_]+", expression)))
        if words:  # the common small-model mistake: units or prose inside the expression
            shown = ", ".join(repr(w) for w in words[:5]) + (", ..." if len(words) > 5 else "")
            raise CalculatorError(
                f"invalid syntax: words are not allowed ({shown}); write only numbers and "
                "+ - * / // % ** ( ), e.g. 12 * 3 + 4"
            ) from None
        raise CalculatorError(f"invalid syntax: {getattr(exc, 'msg', exc)}") from None
    except RecursionError:
        raise CalculatorError("expression nested too deeply") from None
    try:
        return _to_result(_evaluate(tree))
    except RecursionError:
        raise CalculatorError("expression nested too deeply") from None


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / ** and parentheses).

    Args:
        expression: e.g. (2+3)*4

    Returns:
        The result as a string, e.g. "20" or "3.5".

    Raises:
        CalculatorError: the expression is invalid or too large (see evaluate_arithmetic).
    """
    return str(evaluate_arithmetic(expression))
