"""Tools the policy can call: definitions, the tool-call parser, execution, and built-ins.

Data flow: the assistant text goes through :func:`parse_tool_calls` (calls and parser errors),
then :func:`execute_tool_calls` runs them against a ``{name: Tool}`` mapping and returns one
``ToolResult`` per call or error. :func:`render_tool_system_prompt` tells the policy which
tools exist and how to call them.

Layer rule: this package imports only the standard library and :mod:`agentic_rl.types`.
"""

from agentic_rl.tools.base import Tool, ToolArgumentError, execute_tool_calls, tool
from agentic_rl.tools.calculator import CalculatorError, calculator, evaluate_arithmetic
from agentic_rl.tools.parser import parse_tool_calls
from agentic_rl.tools.prompt import render_tool_system_prompt

__all__ = [
    "Tool",
    "tool",
    "ToolArgumentError",
    "execute_tool_calls",
    "parse_tool_calls",
    "calculator",
    "evaluate_arithmetic",
    "CalculatorError",
    "render_tool_system_prompt",
]
