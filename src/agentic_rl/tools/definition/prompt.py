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

``style="signature"`` writes each tool as a typed signature and its description instead of the
whole JSON schema, about a third of the tokens (the per-parameter descriptions are left out)::

    click(ref: integer) - Click the element [ref].
    scroll(direction: "up" | "down", ref?: integer) - Scroll ...

A ``?`` marks an optional parameter; an ``enum`` is written as its values. For a small model
whose prompt is mostly tool schemas (the MiniWoB tools: ~600 of ~700 prompt tokens) this cuts
the prefill and the update's tokens; the call syntax is the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentic_rl.tools.definition.parser import CLOSE_TAG, OPEN_TAG

__all__ = [
    "render_tool_system_prompt",
    "split_tool_system_prompt",
    "TOOL_PROMPT_STYLES",
    "TOOLS_HEADER",
    "tool_signature",
]

TOOLS_HEADER = f'Tools (call one with {OPEN_TAG}{{"name": NAME, "arguments": {{...}}}}{CLOSE_TAG}):'


TOOL_PROMPT_STYLES = ("json", "signature")


def _type_text(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in prop["enum"])
    kind = prop.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array" and isinstance(prop.get("items"), dict):
        return f"array of {_type_text(prop['items'])}"
    return str(kind)


def tool_signature(schema: dict[str, Any]) -> str:
    """One tool as ``name(param: type, optional?: type) - description`` (module docstring).

    Required parameters come first, in the schema's order, then the optional ones.

    Raises:
        TypeError: ``schema`` is not a dict.
        KeyError: it has no ``name``.
    """
    if not isinstance(schema, dict):
        raise TypeError(f"tool schemas must be dicts (Tool.schema()), got {type(schema).__name__}")
    params = schema.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = [n for n in params.get("required") or [] if n in props]
    optional = [n for n in props if n not in required]
    args = [f"{n}: {_type_text(props[n])}" for n in required]
    args += [f"{n}?: {_type_text(props[n])}" for n in optional]
    text = f"{schema['name']}({', '.join(args)})"
    description = str(schema.get("description") or "").strip()
    return f"{text} - {description}" if description else text


def render_tool_system_prompt(
    instructions: str,
    tools: Sequence[dict[str, Any]],
    style: str = "json",
    header: str = TOOLS_HEADER,
) -> str:
    """Append the tool schemas to ``instructions`` in the format of the module docstring.

    Args:
        instructions: the system prompt text (task rules, answer format, ...).
        tools: tool schemas as returned by ``Tool.schema()``.
        style: ``"json"`` (each schema as one JSON line) or ``"signature"`` (a typed signature
            and the description per tool).
        header: the line before the list (another tool-call format's syntax:
            :meth:`~agentic_rl.tools.definition.formats.ToolFormat.tools_header`).

    Returns:
        ``instructions`` unchanged when ``tools`` is empty, else the rendered prompt.

    Raises:
        TypeError: a tool schema is not a dict or is not JSON-serialisable.
        ValueError: an unknown ``style``.
    """
    if style not in TOOL_PROMPT_STYLES:
        raise ValueError(f"tool prompt style must be one of {TOOL_PROMPT_STYLES}, got {style!r}")
    if not tools:
        return instructions
    lines = []
    for schema in tools:
        if not isinstance(schema, dict):
            kind = type(schema).__name__
            raise TypeError(f"tool schemas must be dicts (Tool.schema()), got {kind}")
        if style == "signature":
            lines.append(tool_signature(schema))
        else:
            lines.append(json.dumps(schema, ensure_ascii=False))
    return f"{instructions}\n\n{header}\n" + "\n".join(lines)


def split_tool_system_prompt(
    content: str, tools: Sequence[dict[str, Any]]
) -> tuple[str, str] | None:
    """``(instructions, style)`` of a system prompt that :func:`render_tool_system_prompt` wrote
    for ``tools`` (either style, the default header), or None when ``content`` is not exactly
    such a prompt (an env that wrote its own tool prompt, or no tools). The inverse lets a chat
    format show the tools its own way (a template's ``tools`` block, another call syntax).
    Never raises for dict schemas; non-dict schemas give None."""
    if not tools or not all(isinstance(t, dict) for t in tools):
        return None
    at = content.rfind(f"\n\n{TOOLS_HEADER}\n")
    if at == -1:
        return None
    instructions = content[:at]
    for style in TOOL_PROMPT_STYLES:
        if render_tool_system_prompt(instructions, tools, style) == content:
            return instructions, style
    return None
