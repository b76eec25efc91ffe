"""A calculator agent written with the plain ``openai`` client: a tool loop, no agentic-rl import.

It answers an arithmetic question with a ``calculator`` tool it runs itself, in at most
``MAX_CALLS`` model calls, and grades its final answer against the expected number. Run it
against any OpenAI-compatible endpoint::

    python examples/calculator_agent.py --base-url http://127.0.0.1:8000/v1 "What is 347 * 28?"

Train it with RL (docs/agents.md): the trainer calls :func:`run` with each task and a rollout's
base URL, records every call's tokens and trains on the reward it returns::

    agentic-rl train --agent examples.calculator_agent:run          # reward: the outcome
    agentic-rl train --agent examples.calculator_agent:run_shaped   # + process and cost terms

Its system prompt and tool schema are those of agentic-rl's ``calculator-v0`` env, so the
trainer's warm-up (the env oracle's demonstrations) teaches the call format this agent's
prompts render to; tasks come from that env (``task["prompt"]``, ``task["info"]["expected"]``).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import operator
import re
from fractions import Fraction

from openai import AsyncOpenAI

SYSTEM = (
    "You are a helpful assistant. Use the calculator tool for arithmetic. "
    "When you know the result, reply with <answer>NUMBER</answer>."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression (+ - * / ** and parentheses).",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. (2+3)*4"}},
                "required": ["expression"],
                "additionalProperties": False,
            },
        },
    }
]
MAX_CALLS = 3
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > 100):
            raise ValueError("only whole exponents up to 100")
        return Fraction(_OPS[type(node.op)](left, right))
    raise ValueError(f"unsupported syntax ({type(node).__name__})")


def calculate(expression: str) -> str:
    """The calculator tool: exact arithmetic, whole numbers as ints, others to 10 digits."""
    try:
        if len(expression) > 200:
            raise ValueError("expression too long")
        value = _eval(ast.parse(expression.replace("×", "*").replace("÷", "/"), mode="eval"))
    except ZeroDivisionError:
        return "Error: CalculatorError: division by zero"
    except (ValueError, SyntaxError, TypeError) as exc:
        return f"Error: CalculatorError: {exc}"
    if value.denominator == 1:
        return str(int(value))
    rounded = float(f"{float(value):.10g}")
    return str(int(rounded)) if rounded.is_integer() else str(rounded)


def run_tool(name: str, arguments: str) -> str:
    """Run one tool call of the model."""
    if name != "calculator":
        return f"Error: unknown tool {name!r}. Available tools: calculator"
    try:
        expression = json.loads(arguments or "{}").get("expression")
    except (ValueError, AttributeError):
        return "Error: the arguments are not a JSON object"
    if not isinstance(expression, str):
        return "Error: calculator needs a string 'expression'"
    return calculate(expression)


async def solve(
    client: AsyncOpenAI, question: str, model: str = "policy", stats: dict | None = None
) -> str:
    """The tool loop: ask, run the tool calls, ask again; returns the final reply's text.

    ``stats``, when given, collects ``calls`` (tool calls run), ``computed`` (the numeric results
    of calls whose expression was not a bare number) and ``tokens`` (completion tokens).
    """
    stats = {} if stats is None else stats
    stats.update(calls=0, computed=[], tokens=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    reply = ""
    for _ in range(MAX_CALLS):
        response = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        stats["tokens"] += response.usage.completion_tokens if response.usage else 0
        message = response.choices[0].message
        reply = message.content or ""
        if not message.tool_calls:
            return reply
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = run_tool(call.function.name, call.function.arguments)
            stats["calls"] += 1
            _note_computed(stats, call.function.arguments, result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return reply


def _number(text: str) -> Fraction | None:
    try:
        return Fraction(text.strip().replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _note_computed(stats: dict, arguments: str, result: str) -> None:
    """Record a call's result when it computed something (not a bare number, no error)."""
    try:
        expression = json.loads(arguments or "{}").get("expression", "")
    except (ValueError, AttributeError):
        return
    value = _number(result)
    if value is not None and isinstance(expression, str) and _number(expression) is None:
        stats["computed"].append(value)


def _answer(reply: str) -> Fraction | None:
    """The number of the reply's single ``<answer>`` tag (None: no tag, several, or no number)."""
    tags = re.findall(r"<answer>(.*?)</answer>", reply, flags=re.S)
    return _number(tags[0]) if len(tags) == 1 else None


def grade(reply: str, expected: float) -> float:
    """1.0 when the reply holds exactly one ``<answer>`` tag whose number equals ``expected``."""
    answer = _answer(reply)
    return 1.0 if answer is not None and answer == Fraction(str(expected)) else 0.0


async def run(task: dict, base_url: str) -> float:
    """The trainer's entry point: solve ``task["prompt"]`` through ``base_url``, return the reward
    (the outcome: 1.0 for a right answer, else 0.0)."""
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        reply = await solve(client, task["prompt"])
    return grade(reply, task["info"]["expected"])


async def run_shaped(task: dict, base_url: str) -> dict:
    """As :func:`run`, reporting the outcome with process and cost components, each in its
    group (the same terms as ``calculator-v0``'s rubric: the share of calls that computed
    something, an answer grounded in a computed result, 0.02 per call, 0.0005 per token)."""
    stats: dict = {}
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        reply = await solve(client, task["prompt"], stats=stats)
    correct = grade(reply, task["info"]["expected"])
    answer = _answer(reply)
    grounded = answer is not None and (correct or answer in stats["computed"])
    return {
        "components": {
            "correct_answer": correct,
            "computed_calls": len(stats["computed"]) / stats["calls"] if stats["calls"] else 0.0,
            "grounded_answer": float(grounded),
            "tool_calls": 0.02 * stats["calls"],
            "generated_tokens": 0.0005 * stats["tokens"],
        },
        "groups": {
            "computed_calls": "process",
            "grounded_answer": "process",
            "tool_calls": "cost",
            "generated_tokens": "cost",
        },
    }


def main() -> None:
    """Answer one question against an endpoint (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default="policy")
    args = parser.parse_args()

    async def ask() -> str:
        async with AsyncOpenAI(base_url=args.base_url, api_key="unused") as client:
            return await solve(client, args.question, args.model)

    print(asyncio.run(ask()))


if __name__ == "__main__":
    main()
