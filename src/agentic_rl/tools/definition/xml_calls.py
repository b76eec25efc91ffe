"""Parser of the ``qwen3_coder`` tool-call format (Qwen3-Coder, Qwen3.5: XML-style parameters).

Same contract as :func:`agentic_rl.tools.definition.parser.parse_tool_calls`: pure, never raises,
linear in the text, valid text everywhere, ids ``call_<turn>_<k>`` over every call position::

    <tool_call>
    <function=calculator>
    <parameter=expression>
    17 * 23
    </parameter>
    </function>
    </tool_call>

Each ``<tool_call>`` opens a block that ends at the next ``<tool_call>`` (or the end); text
outside blocks is ignored. A block must hold ``<function=NAME>`` … ``</function>`` and then
``</tool_call>``; between them, any number of ``<parameter=KEY>`` … ``</parameter>`` (one newline
after the opening tag and one before the closing tag are not part of the value). A value that is
JSON for a number, ``true``/``false``/``null``, an object or an array is decoded (the templates
write non-string arguments as JSON); any other value is kept as a string. A parameter given twice,
text other than whitespace between parameters, or a missing closing tag is an error of that call.
"""

from __future__ import annotations

import re
from typing import Any

from agentic_rl.tools.definition.parser import _DECODE_ERRORS, _DECODER, _valid_strings
from agentic_rl.types import ToolCall, ToolCallError, valid_text

__all__ = ["parse_qwen3_coder", "QWEN3_CODER_HINT", "FUNCTION_OPEN"]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAM_OPEN = "<parameter="
PARAM_CLOSE = "</parameter>"
QWEN3_CODER_HINT = (
    "expected <tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nvalue\\n</parameter>\\n"
    "</function>\\n</tool_call>"
)
_JSON_START = re.compile(r"[-\d\[{]|true\b|false\b|null\b")
_Parsed = tuple[tuple[ToolCall, ...], tuple[ToolCallError, ...]]


def _value(raw: str) -> Any:
    """A parameter's value: decoded JSON when the whole text is a JSON non-string, else the text."""
    text = raw.removeprefix("\n").removesuffix("\n")
    stripped = text.strip()
    if _JSON_START.match(stripped):
        try:
            value, end = _DECODER.raw_decode(stripped)
        except _DECODE_ERRORS:
            return text
        if end == len(stripped):
            return _valid_strings(value)
    return text


def _error(raw: str, message: str) -> ToolCallError:
    return ToolCallError(raw=raw.strip(), message=f"{message}; {QWEN3_CODER_HINT}")


def _parameters(body: str) -> dict[str, Any] | str:
    """The parameters of a function body, or an error message."""
    out: dict[str, Any] = {}
    pos = 0
    while True:
        start = body.find(PARAM_OPEN, pos)
        gap = body[pos:] if start == -1 else body[pos:start]
        if gap.strip():
            shown = gap.strip()[:40]
            return f"unexpected text between parameters: {shown!r}"
        if start == -1:
            return out
        name_end = body.find(">", start)
        close = body.find(PARAM_CLOSE, start)
        if name_end == -1 or close == -1 or close < name_end:
            return "a <parameter=...> without its closing </parameter>"
        key = body[start + len(PARAM_OPEN) : name_end].strip()
        if not key:
            return "a parameter without a name"
        if key in out:
            return f'the parameter "{key}" is given twice'
        out[key] = _value(body[name_end + 1 : close])
        pos = close + len(PARAM_CLOSE)


def _block(block: str, turn_index: int, k: int) -> ToolCall | ToolCallError:
    """The call of one ``<tool_call>`` block (the text after the tag, up to the next one)."""
    end = block.find(CLOSE_TAG)
    body = block if end == -1 else block[:end]
    if end == -1:
        return _error(body, f"missing closing {CLOSE_TAG} tag")
    head = body.lstrip()
    if not head.startswith(FUNCTION_OPEN):
        return _error(body, f"the call must start with {FUNCTION_OPEN}NAME>")
    name_end = head.find(">")
    close = head.rfind(FUNCTION_CLOSE)
    if name_end == -1 or close == -1 or close < name_end:
        return _error(body, f"missing closing {FUNCTION_CLOSE} tag")
    if head[close + len(FUNCTION_CLOSE) :].strip():
        return _error(body, f"unexpected text after {FUNCTION_CLOSE}")
    name = head[len(FUNCTION_OPEN) : name_end].strip()
    if not name:
        return _error(body, "the function has no name")
    arguments = _parameters(head[name_end + 1 : close])
    if isinstance(arguments, str):
        return _error(body, arguments)
    return ToolCall(name=name, arguments=arguments, raw=body.strip(), id=f"call_{turn_index}_{k}")


def parse_qwen3_coder(text: str, turn_index: int = 0) -> _Parsed:
    """Parse every ``<tool_call><function=...>`` block of ``text`` (format: module docstring).

    Returns:
        ``(calls, errors)`` in message order.

    Never raises, for any ``text``.
    """
    text = valid_text(text)
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    pos, k = text.find(OPEN_TAG), 0
    while pos != -1:
        body = pos + len(OPEN_TAG)
        nxt = text.find(OPEN_TAG, body)
        parsed = _block(text[body:] if nxt == -1 else text[body:nxt], turn_index, k)
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)  # type: ignore[arg-type]
        pos, k = nxt, k + 1
    return tuple(calls), tuple(errors)
