"""Parse tool calls out of an assistant message.

Format
------
A tool call is one JSON object between ``<tool_call>`` and ``</tool_call>`` tags::

    <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>

Rules, in the order the parser applies them:

1. Text outside the tags is ignored. A message may hold any number of calls; they are
   returned in order. A stray ``</tool_call>`` without an opening tag is ignored.
2. Every ``<tool_call>`` opens a new block, which ends at the next ``<tool_call>`` (or at the
   end of the message): a call's JSON cannot contain the literal text ``<tool_call>`` (inside
   a JSON string write it ``\\u003ctool_call>``). This keeps parsing linear in the message length.
3. Whitespace and newlines between the tags and the JSON object are allowed.
4. The JSON object is decoded with :meth:`json.JSONDecoder.raw_decode`, starting at the first
   non-space character after ``<tool_call>``. The object ends where the JSON ends, so nested
   braces and strings containing ``}`` or the literal text ``</tool_call>`` are fine. A key
   that appears twice in one object, or an integer with more digits than Python converts
   (``sys.get_int_max_str_digits()``, 4,300 by default), makes the call an error.
5. After the object (and optional whitespace) the next text must be ``</tool_call>``.
6. ``"name"`` is required and must be a non-empty string.
7. ``"arguments"`` must be a JSON object. ``"parameters"`` is accepted as an alias; a call with
   both is an error (ambiguous). Missing, ``null`` or an empty string means ``{}``. A JSON
   *string* that itself decodes to an object (``"arguments": "{\\"expression\\": \\"2+2\\"}"``)
   is decoded, since models often double-encode. A call without ``"arguments"``/``"parameters"``
   but with another key holding an object (``"args": {...}``) is an error, so arguments under
   a wrong key are never silently dropped. Other keys of the call object are ignored.

Text validity: lone surrogates (U+D800–U+DFFF, from the message itself or from ``"\\ud800"``
escapes in the JSON) are replaced by U+FFFD (:func:`agentic_rl.types.valid_text`) in ``raw``,
the name and every string of the arguments, keys included, so what the parser returns can be
encoded as UTF-8 by the permission policy, the audit log, the tokenizer and the store.

A call that breaks a rule becomes a :class:`~agentic_rl.types.ToolCallError` (its ``raw`` is
the text after ``<tool_call>`` up to the first ``</tool_call>`` of its block, or the whole
block) and parsing continues with the next block. Errors are data for the policy to read,
never exceptions.

Ids: accepted calls get ``raw`` = the exact JSON text and ``id = call_id(turn_index, k)``
(``call_<turn>_<k>``), where ``k`` is the position of the call's block among all the
``<tool_call>`` blocks of the message, accepted or rejected, from 0. A rejected block's ``k`` is
thus missing from the accepted ids, and :func:`in_call_order` puts calls and errors back in
message order. :func:`call_id` is the one id scheme of the project: a caller that adds calls of
its own to a message (the structured tool calls of a chat-completions reply) numbers them on
from the message's last block, so that no two calls or errors of a turn share an id.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from agentic_rl.types import ToolCall, ToolCallError, valid_text

__all__ = [
    "parse_tool_calls",
    "format_tool_call",
    "in_call_order",
    "call_id",
    "OPEN_TAG",
    "CLOSE_TAG",
]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_FORMAT_HINT = f'expected {OPEN_TAG}{{"name": "...", "arguments": {{...}}}}{CLOSE_TAG}'
_SPACE = re.compile(r"\s*")
_CALL_ID = re.compile(r"call_(\d+)_(\d+)\Z")


def call_id(turn_index: int, k: int) -> str:
    """The id of the ``k``-th call (or rejected call) of turn ``turn_index``: ``call_<turn>_<k>``."""
    return f"call_{turn_index}_{k}"


class _BadValue(ValueError):
    """A JSON value the decoder hooks refuse (duplicate key, too many digits); the message is for the policy."""


def _valid_strings(value: Any) -> Any:
    """``value`` with its strings made valid text; lists are walked (iteratively: any depth) in place.

    Objects need no walk: :func:`_object` builds every object from already valid members.
    """
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        stack = [value]
        while stack:
            items = stack.pop()
            for i, item in enumerate(items):
                if isinstance(item, str):
                    items[i] = valid_text(item)
                elif isinstance(item, list):
                    stack.append(item)
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Decoder hook of every JSON object: valid strings, and no key twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        key = valid_text(key)
        if key in out:
            raise _BadValue(
                f'the key "{key}" appears twice in one JSON object; each key must appear once'
            )
        out[key] = _valid_strings(value)
    return out


def _int(digits: str) -> int:
    """Decoder hook of every JSON integer: Python's int-from-string digit limit is an error message."""
    try:
        return int(digits)
    except ValueError:
        limit = sys.get_int_max_str_digits()
        raise _BadValue(
            f"a number has {len(digits.lstrip('-'))} digits, more than the {limit} "
            "this parser reads"
        ) from None


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_int=_int)
_DECODE_ERRORS = (json.JSONDecodeError, RecursionError, _BadValue)


def _decode_string_arguments(key: str, value: str) -> dict[str, Any] | str:
    """A JSON-encoded ``arguments`` string decoded to a dict, or an error message."""
    value = value.strip()
    if not value:
        return {}
    try:
        decoded, end = _DECODER.raw_decode(value)
    except _DECODE_ERRORS as exc:
        why = (
            exc.msg
            if isinstance(exc, json.JSONDecodeError)
            else str(exc)
            if isinstance(exc, _BadValue)
            else "nested too deeply"
        )
        return f'"{key}" is a string that is not valid JSON ({why}); it must be a JSON object'
    if end != len(value):
        return f'"{key}" is a string with text after its JSON value; it must be one JSON object'
    if not isinstance(decoded, dict):
        return f'"{key}" is a string that does not decode to a JSON object'
    return decoded


def _arguments(obj: dict[str, Any]) -> dict[str, Any] | str:
    """The call's arguments as a dict, or an error message."""
    present = [k for k in ("arguments", "parameters") if k in obj]
    if len(present) == 2:
        return 'the call has both "arguments" and "parameters"; give the arguments once, as "arguments"'
    if not present:
        stray = [k for k, v in obj.items() if k != "name" and isinstance(v, dict)]
        if stray:
            return (
                f'the call has no "arguments" but an object under "{stray[0]}"; name it "arguments"'
            )
        return {}
    key = present[0]
    value = obj[key]
    if value is None:
        return {}
    if isinstance(value, str):
        value = _decode_string_arguments(key, value)
        if isinstance(value, str):
            return value
    if not isinstance(value, dict):
        kind = type(value).__name__
        return f'"{key}" must be a JSON object of named arguments, got {kind}'
    return value


def _check(obj: Any, hint: str = _FORMAT_HINT) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` from a decoded call object, or an error message (``hint``: the
    format's expected syntax, quoted in the message)."""
    if not isinstance(obj, dict):
        return f"the tool call must be a JSON object, got {type(obj).__name__}; {hint}"
    name = obj.get("name")
    if name is None:
        return f'the tool call has no "name"; {hint}'
    if not isinstance(name, str) or not name.strip():
        got = repr(name) if isinstance(name, str) else type(name).__name__
        return f'"name" must be a non-empty string, got {got}'
    arguments = _arguments(obj)
    if isinstance(arguments, str):
        return arguments
    return name, arguments


def _decode_error_text(exc: Exception, start: int, hint: str) -> str:
    """The message of JSON that did not decode at ``start`` (any format; ``hint``: its syntax)."""
    if isinstance(exc, RecursionError):
        return "invalid JSON (nested too deeply)"
    if isinstance(exc, _BadValue):
        return f"invalid tool call: {exc}"
    assert isinstance(exc, json.JSONDecodeError)
    return f"invalid JSON ({exc.msg} at character {exc.pos - start}); {hint}"


def _decode_error(block: str, start: int, exc: Exception, reopened: bool) -> str:
    """The message of a block whose JSON did not decode."""
    if start >= len(block) or block.startswith(CLOSE_TAG, start):
        return f"empty tool call; {_FORMAT_HINT}"
    message = _decode_error_text(exc, start, _FORMAT_HINT)
    if (
        reopened
        and isinstance(exc, json.JSONDecodeError)
        and (exc.pos >= len(block) or exc.msg.startswith("Unterminated string"))
    ):
        message += f"; a new {OPEN_TAG} began before this call's JSON ended"
    return message


def _parse_block(block: str, reopened: bool) -> tuple[str, dict[str, Any], str] | ToolCallError:
    """``(name, arguments, raw JSON)`` of one block (the text after a ``<tool_call>`` up to the
    next one or the end), or its error. ``reopened``: another ``<tool_call>`` follows the block."""
    start = _SPACE.match(block).end()
    try:
        obj, end = _DECODER.raw_decode(block, start)
    except _DECODE_ERRORS as exc:
        close = block.find(CLOSE_TAG)
        raw = (block if close == -1 else block[:close]).strip()
        return ToolCallError(raw=raw, message=_decode_error(block, start, exc, reopened))
    after = _SPACE.match(block, end).end()
    if not block.startswith(CLOSE_TAG, after):
        close = block.find(CLOSE_TAG, end)
        if close == -1:
            return ToolCallError(
                raw=block.strip(), message=f"missing closing {CLOSE_TAG} tag after the JSON object"
            )
        junk = block[after:close].strip()
        shown = junk if len(junk) <= 40 else f"{junk[:40]}… ({len(junk)} chars)"
        return ToolCallError(
            raw=block[:close].strip(),
            message=f"unexpected text after the JSON object: {shown!r}; {_FORMAT_HINT}",
        )
    checked = _check(obj)
    raw_json = block[start:end]
    if isinstance(checked, str):
        return ToolCallError(raw=raw_json, message=checked)
    return checked[0], checked[1], raw_json


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block, the format
    :func:`parse_tool_calls` reads (e.g. an env's scripted oracle reply). Never raises for
    JSON-serialisable ``arguments``.

    Raises:
        TypeError: ``arguments`` holds a value JSON cannot encode.
    """
    return f"{OPEN_TAG}{json.dumps({'name': name, 'arguments': arguments})}{CLOSE_TAG}"


def parse_tool_calls(
    text: str, turn_index: int = 0
) -> tuple[tuple[ToolCall, ...], tuple[ToolCallError, ...]]:
    """Parse every ``<tool_call>{...}</tool_call>`` block of ``text`` (format: module docstring).

    Time is linear in ``len(text)``: each block is scanned once, up to the next ``<tool_call>``.

    Args:
        text: the assistant message.
        turn_index: index of the turn, used in the call ids (``call_<turn>_<k>``).

    Returns:
        ``(calls, errors)``: the accepted calls and the rejected ones, each in message order
        (:func:`in_call_order` interleaves them).

    Never raises, for any ``text``: malformed calls become ``ToolCallError`` values.
    """
    text = valid_text(text)
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    pos, k = text.find(OPEN_TAG), 0
    while pos != -1:
        body = pos + len(OPEN_TAG)
        nxt = text.find(OPEN_TAG, body)
        parsed = _parse_block(text[body:] if nxt == -1 else text[body:nxt], reopened=nxt != -1)
        if isinstance(parsed, ToolCallError):
            errors.append(parsed)
        else:
            name, arguments, raw = parsed
            calls.append(
                ToolCall(name=name, arguments=arguments, raw=raw, id=call_id(turn_index, k))
            )
        pos, k = nxt, k + 1
    return tuple(calls), tuple(errors)


def _positions(calls: Sequence[ToolCall], total: int) -> list[int] | None:
    """Block positions ``k`` of the calls, read from their ids, or None if the ids are not the parser's."""
    found = [_CALL_ID.match(c.id) for c in calls]
    if not all(found):
        return None
    ks = [int(m.group(2)) for m in found if m]
    turns = {m.group(1) for m in found if m}
    if len(turns) > 1 or any(b <= a for a, b in zip(ks, ks[1:])) or (ks and ks[-1] >= total):
        return None
    return ks


def in_call_order(
    calls: Sequence[ToolCall], errors: Sequence[ToolCallError], turn_index: int | None = None
) -> list[tuple[str, ToolCall | ToolCallError]]:
    """The calls and parser errors of one message, interleaved in message order, with their ids.

    The parser's ids say where each accepted call stood (``call_<turn>_<k>``, ``k`` counting every
    block); the errors fill the other positions, in order, and get the id of their position
    (the turn read from the calls' ids, else ``turn_index``; ``""`` when neither is known). When
    the calls' ids are not the parser's (hand-built, or from another source), the order cannot
    be known: errors come first, with id ``""``, then the calls.

    Returns:
        ``[(call_id, call_or_error), ...]``, ``len(calls) + len(errors)`` items. Never raises.
    """
    total = len(calls) + len(errors)
    ks = _positions(calls, total)
    if ks is None:
        return [("", e) for e in errors] + [(c.id, c) for c in calls]
    turn = _CALL_ID.match(calls[0].id).group(1) if calls else turn_index  # type: ignore[union-attr]
    slots: list[ToolCall | None] = [None] * total
    for k, call in zip(ks, calls):
        slots[k] = call
    pending = iter(errors)
    out: list[tuple[str, ToolCall | ToolCallError]] = []
    for k, slot in enumerate(slots):
        if slot is not None:
            out.append((slot.id, slot))
        else:
            out.append(("" if turn is None else call_id(int(turn), k), next(pending)))
    return out
