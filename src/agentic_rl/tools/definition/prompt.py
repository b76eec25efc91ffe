"""Render tool schemas into a system prompt.

The default model's chat template ignores the ``tools`` argument, so the tools are described
in the system prompt itself, in this one format (compact, since every prompt token costs
time)::

    {instructions}

    Tools (call one with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>):
    {"name": "calculator", "description": "...", "parameters": {...}}

One line per tool: the schema as ``json.dumps`` writes it with default separators, no
indentation, and non-ASCII characters kept as they are. The call syntax is the one
:mod:`agentic_rl.tools.definition.parser` reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentic_rl.tools.definition.parser import CLOSE_TAG, OPEN_TAG

__all__ = ["render_tool_system_prompt", "TOOLS_HEADER"]

TOOLS_HEADER = f'Tools (call one with {OPEN_TAG}{{"name": NAME, "arguments": {{...}}}}{CLOSE_TAG}):'


def render_tool_system_prompt(instructions: str, tools: Sequence[dict[str, Any]]) -> str:
    """Append the tool schemas to ``instructions`` in the format of the module docstring.

    Args:
        instructions: the system prompt text (task rules, answer format, ...).
        tools: tool schemas as returned by ``Tool.schema()``.

    Returns:
        ``instructions`` unchanged when ``tools`` is empty, else the rendered prompt.

    Raises:
        TypeError: a tool schema is not a dict or is not JSON-serialisable.
    """
    if not tools:
        return instructions
    lines = []
    for schema in tools:
        if not isinstance(schema, dict):
            kind = type(schema).__name__
            raise TypeError(f"tool schemas must be dicts (Tool.schema()), got {kind}")
        lines.append(json.dumps(schema, ensure_ascii=False))
    return f"{instructions}\n\n{TOOLS_HEADER}\n" + "\n".join(lines)
