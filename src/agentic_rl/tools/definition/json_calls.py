"""Parsers of the JSON tool-call formats other than Hermes: Llama 3 JSON and Mistral.

Both follow the contract of :func:`agentic_rl.tools.definition.parser.parse_tool_calls`: a pure
function ``(text, turn_index) -> (calls, errors)`` that never raises, runs in time linear in the
text, decodes each call's JSON with the same strict decoder (duplicate keys, over-long integers
and deep nesting are errors), checks the call object with the same rules (``"name"``, and
``"arguments"`` or its alias ``"parameters"``), makes every string valid text, and gives accepted
calls the id ``call_<turn>_<k>`` where ``k`` counts every call position of the message, accepted
or rejected, so :func:`~agentic_rl.tools.definition.parser.in_call_order` interleaves them.

``llama3_json`` (Llama 3.1/3.2/3.3 "JSON based tool calling", as their chat templates teach it)::

    {"name": "calculator", "parameters": {"expression": "2+2"}}

A reply is a tool-call reply when, after leading whitespace and an optional ``<|python_tag|>``,
it starts with ``{``; any other reply holds no call. The reply is then a sequence of JSON objects
separated by whitespace and optional ``;``, one call each. An object that does not decode is an
error and ends the parse (the rest of the reply is its ``raw``); text after the last object that is
not whitespace or ``;`` is an error (unexpected text).

``mistral`` (Mistral's ``[TOOL_CALLS]`` control token, both generations of it)::

    [TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "2+2"}}]      (v3 tokenizers)
    [TOOL_CALLS]calculator[ARGS]{"expression": "2+2"}                          (v11+ tokenizers)

Text before the first ``[TOOL_CALLS]`` is ignored. Each ``[TOOL_CALLS]`` opens a block that ends
at the next one (or the end). A block starting with ``[`` is a JSON array of call objects (one
call position per element; a non-object element is an error); otherwise the block is
``NAME[ARGS]{json}`` (or ``NAME{json}``): the name runs up to ``[ARGS]`` or ``{``, and the
arguments object must decode and be followed by nothing but whitespace.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentic_rl.tools.definition.parser import (
    _DECODE_ERRORS,
    _DECODER,
    _check,
    _decode_error_text,
)
from agentic_rl.types import ToolCall, ToolCallError, valid_text

__all__ = [
    "parse_llama3_json",
    "parse_mistral",
    "PYTHON_TAG",
    "TOOL_CALLS",
    "ARGS",
    "LLAMA3_HINT",
    "MISTRAL_HINT",
]

PYTHON_TAG = "<|python_tag|>"
TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
LLAMA3_HINT = 'expected {"name": "...", "parameters": {...}} as the whole reply'
MISTRAL_HINT = f'expected {TOOL_CALLS}[{{"name": "...", "arguments": {{...}}}}]'
_SPACE = re.compile(r"\s*")
_SEPARATOR = re.compile(r"[\s;]*")
_Parsed = tuple[tuple[ToolCall, ...], tuple[ToolCallError, ...]]


def _accept(obj: Any, raw: str, turn_index: int, k: int, hint: str) -> ToolCall | ToolCallError:
    """The call of one decoded object (rules of the Hermes parser), or its error."""
    checked = _check(obj, hint)
    if isinstance(checked, str):
        return ToolCallError(raw=raw, message=checked)
    return ToolCall(name=checked[0], arguments=checked[1], raw=raw, id=f"call_{turn_index}_{k}")


def _split(items: list[ToolCall | ToolCallError]) -> _Parsed:
    calls = tuple(i for i in items if isinstance(i, ToolCall))
    errors = tuple(i for i in items if isinstance(i, ToolCallError))
    return calls, errors


def parse_llama3_json(text: str, turn_index: int = 0) -> _Parsed:
    """Parse a Llama 3 JSON tool-call reply (format: module docstring).

    Args:
        text: the assistant message.
        turn_index: index of the turn, used in the call ids.

    Returns:
        ``(calls, errors)`` in message order. A reply that does not start with ``{`` (after
        whitespace and an optional ``<|python_tag|>``) gives ``((), ())``.

    Never raises, for any ``text``; time is linear in ``len(text)``.
    """
    text = valid_text(text)
    pos = _SPACE.match(text).end()
    if text.startswith(PYTHON_TAG, pos):
        pos = _SPACE.match(text, pos + len(PYTHON_TAG)).end()
    if not text.startswith("{", pos):
        return (), ()
    items: list[ToolCall | ToolCallError] = []
    while pos < len(text):
        k = len(items)
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except _DECODE_ERRORS as exc:
            message = _decode_error_text(exc, pos, LLAMA3_HINT)
            items.append(ToolCallError(raw=text[pos:].strip(), message=message))
            break
        items.append(_accept(obj, text[pos:end], turn_index, k, LLAMA3_HINT))
        pos = _SEPARATOR.match(text, end).end()
        if pos < len(text) and text[pos] != "{":
            rest = text[pos:].strip()
            shown = rest if len(rest) <= 40 else f"{rest[:40]}… ({len(rest)} chars)"
            items.append(
                ToolCallError(
                    raw=rest,
                    message=f"unexpected text after the tool call: {shown!r}; {LLAMA3_HINT}",
                )
            )
            break
    return _split(items)


def _array_block(block: str, start: int, turn_index: int, k: int) -> list[ToolCall | ToolCallError]:
    """The calls of one ``[TOOL_CALLS][...]`` block (its JSON array starts at ``start``)."""
    try:
        array, end = _DECODER.raw_decode(block, start)
    except _DECODE_ERRORS as exc:
        return [
            ToolCallError(raw=block.strip(), message=_decode_error_text(exc, start, MISTRAL_HINT))
        ]
    if not isinstance(array, list):  # raw_decode at "[" always gives a list; kept for clarity
        return [ToolCallError(raw=block.strip(), message=f"not a JSON array; {MISTRAL_HINT}")]
    items: list[ToolCall | ToolCallError] = []
    for element in array:
        raw = json.dumps(element, ensure_ascii=False) if isinstance(element, dict) else ""
        items.append(_accept(element, raw, turn_index, k + len(items), MISTRAL_HINT))
    junk = block[end:].strip()
    if junk:
        shown = junk if len(junk) <= 40 else f"{junk[:40]}… ({len(junk)} chars)"
        items.append(
            ToolCallError(
                raw=junk, message=f"unexpected text after the tool calls: {shown!r}; {MISTRAL_HINT}"
            )
        )
    return items


def _named_block(block: str, start: int, turn_index: int, k: int) -> ToolCall | ToolCallError:
    """The call of one ``[TOOL_CALLS]NAME[ARGS]{...}`` block."""
    brace = block.find("{", start)
    args_at = block.find(ARGS, start)
    if args_at != -1 and (brace == -1 or args_at < brace):
        name, body = block[start:args_at], _SPACE.match(block, args_at + len(ARGS)).end()
    elif brace != -1:
        name, body = block[start:brace], brace
    else:
        return ToolCallError(raw=block.strip(), message=f"no arguments object; {MISTRAL_HINT}")
    try:
        arguments, end = _DECODER.raw_decode(block, body)
    except _DECODE_ERRORS as exc:
        message = _decode_error_text(exc, body, MISTRAL_HINT)
        return ToolCallError(raw=block.strip(), message=message)
    if block[end:].strip():
        return ToolCallError(
            raw=block.strip(), message=f"unexpected text after the arguments; {MISTRAL_HINT}"
        )
    obj = {"name": name.strip(), "arguments": arguments}
    return _accept(obj, block[start:end].strip(), turn_index, k, MISTRAL_HINT)


def parse_mistral(text: str, turn_index: int = 0) -> _Parsed:
    """Parse the ``[TOOL_CALLS]`` calls of a Mistral reply (format: module docstring).

    Args:
        text: the assistant message (decoded with its special tokens kept).
        turn_index: index of the turn, used in the call ids.

    Returns:
        ``(calls, errors)`` in message order.

    Never raises, for any ``text``; time is linear in ``len(text)``.
    """
    text = valid_text(text)
    items: list[ToolCall | ToolCallError] = []
    pos = text.find(TOOL_CALLS)
    while pos != -1:
        body = pos + len(TOOL_CALLS)
        nxt = text.find(TOOL_CALLS, body)
        block = text[body:] if nxt == -1 else text[body:nxt]
        start = _SPACE.match(block).end()
        if block.startswith("[", start):
            items.extend(_array_block(block, start, turn_index, len(items)))
        else:
            items.append(_named_block(block, start, turn_index, len(items)))
        pos = nxt
    return _split(items)
