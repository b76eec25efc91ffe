"""Parse tool calls out of an assistant message.

Format
------
A tool call is one JSON object between ``<tool_call>`` and ``</tool_call>`` tags::

    <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>

Rules, in the order the parser applies them:

1. Text outside the tags is ignored. A message may hold any number of calls; they are
   returned in order. A stray ``</tool_call>`` without an opening tag is ignored.
2. Whitespace and newlines between the tags and the JSON object are allowed.
3. The JSON object is decoded with :meth:`json.JSONDecoder.raw_decode`, starting at the first
   non-space character after ``<tool_call>``. The object ends where the JSON ends, so nested
   braces and strings containing ``}`` or the literal text ``</tool_call>`` are fine.
4. After the object (and optional whitespace) the next text must be ``</tool_call>``.
5. ``"name"`` is required and must be a non-empty string.
6. ``"arguments"`` must be a JSON object. ``"parameters"`` is accepted as an alias (used only
   when ``"arguments"`` is absent). Missing or ``null`` means ``{}``. A JSON *string* that
   itself decodes to an object (``"arguments": "{\\"expression\\": \\"2+2\\"}"``) is decoded,
   since models often double-encode. Other keys of the call object are ignored.

A call that breaks a rule becomes a :class:`~agentic_rl.types.ToolCallError` (its ``raw`` is
the text after ``<tool_call>`` up to the next ``</tool_call>``, the next ``<tool_call>`` or the
end of the message) and parsing continues after it. Errors are data for the policy to read,
never exceptions.

Accepted calls get ``raw`` = the exact JSON text and ``id = f"call_{turn_index}_{k}"``, where
``k`` counts the accepted calls of the message from 0.
"""

from __future__ import annotations

import json
from typing import Any

from agentic_rl.types import ToolCall, ToolCallError

__all__ = ["parse_tool_calls", "OPEN_TAG", "CLOSE_TAG"]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_FORMAT_HINT = f'expected {OPEN_TAG}{{"name": "...", "arguments": {{...}}}}{CLOSE_TAG}'
_DECODER = json.JSONDecoder()


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _bad_block(text: str, raw_from: int, search_from: int) -> tuple[str, int, bool]:
    """Raw text of a rejected call, the position to resume at, and whether a close tag ended it.

    The block ends at the first ``</tool_call>`` or ``<tool_call>`` at or after
    ``search_from`` (or at the end of ``text``); the raw text starts at ``raw_from``.
    """
    close = text.find(CLOSE_TAG, search_from)
    reopen = text.find(OPEN_TAG, search_from)
    if close != -1 and (reopen == -1 or close < reopen):
        return text[raw_from:close].strip(), close + len(CLOSE_TAG), True
    if reopen != -1:
        return text[raw_from:reopen].strip(), reopen, False
    return text[raw_from:].strip(), len(text), False


def _arguments(obj: dict[str, Any]) -> dict[str, Any] | str:
    """The call's arguments as a dict, or an error message."""
    key = "arguments" if "arguments" in obj else "parameters"
    value = obj.get(key)
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return f'"{key}" is a string that is not valid JSON; it must be a JSON object'
        if not isinstance(value, dict):
            return f'"{key}" is a string that does not decode to a JSON object'
    if not isinstance(value, dict):
        kind = type(value).__name__
        return f'"{key}" must be a JSON object of named arguments, got {kind}'
    return value


def _check(obj: Any) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` from a decoded call object, or an error message."""
    if not isinstance(obj, dict):
        return f"the tool call must be a JSON object, got {type(obj).__name__}; {_FORMAT_HINT}"
    name = obj.get("name")
    if name is None:
        return f'the tool call has no "name"; {_FORMAT_HINT}'
    if not isinstance(name, str) or not name.strip():
        got = repr(name) if isinstance(name, str) else type(name).__name__
        return f'"name" must be a non-empty string, got {got}'
    arguments = _arguments(obj)
    if isinstance(arguments, str):
        return arguments
    return name, arguments


def parse_tool_calls(
    text: str, turn_index: int = 0
) -> tuple[tuple[ToolCall, ...], tuple[ToolCallError, ...]]:
    """Parse every ``<tool_call>{...}</tool_call>`` block of ``text`` (format: module docstring).

    Args:
        text: the assistant message.
        turn_index: index of the turn, used in the call ids (``call_<turn>_<k>``).

    Returns:
        ``(calls, errors)``: the accepted calls and the rejected ones, each in message order.

    Raises:
        Nothing, for any ``text``: malformed calls become ``ToolCallError`` values.
    """
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    pos = text.find(OPEN_TAG)
    while pos != -1:
        body = pos + len(OPEN_TAG)
        start = _skip_space(text, body)
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError) as exc:
            raw, resume, _ = _bad_block(text, body, body)
            if start >= len(text) or text.startswith(CLOSE_TAG, start):
                message = f"empty tool call; {_FORMAT_HINT}"
            elif isinstance(exc, RecursionError):
                message = "invalid JSON (nested too deeply)"
            else:
                offset = exc.pos - start
                message = f"invalid JSON ({exc.msg} at character {offset}); {_FORMAT_HINT}"
            errors.append(ToolCallError(raw=raw, message=message))
            pos = text.find(OPEN_TAG, resume)
            continue
        after = _skip_space(text, end)
        if not text.startswith(CLOSE_TAG, after):
            raw, resume, closed = _bad_block(text, body, end)
            if closed:
                message = f"unexpected text after the JSON object; {_FORMAT_HINT}"
            else:
                message = f"missing closing {CLOSE_TAG} tag after the JSON object"
            errors.append(ToolCallError(raw=raw, message=message))
            pos = text.find(OPEN_TAG, resume)
            continue
        checked = _check(obj)
        raw_json = text[start:end]
        if isinstance(checked, str):
            errors.append(ToolCallError(raw=raw_json, message=checked))
        else:
            name, arguments = checked
            call_id = f"call_{turn_index}_{len(calls)}"
            calls.append(ToolCall(name=name, arguments=arguments, raw=raw_json, id=call_id))
        pos = text.find(OPEN_TAG, after + len(CLOSE_TAG))
    return tuple(calls), tuple(errors)
