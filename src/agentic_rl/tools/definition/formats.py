"""Tool-call formats by name: how a model writes a call, how it is parsed, how it is taught.

A :class:`ToolFormat` bundles, for one family of models, the pure parser of its calls, the
call syntax the system prompt teaches, the way a call is written (demonstrations: the envs'
oracles write Hermes calls, :func:`convert_hermes_reply` rewrites them in the model's format)
and how a tool result is wrapped when the model's chat template has no ``tool`` role.

* ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen2.5/Qwen3,
  Hermes; what this project's tool prompt teaches SmolLM2);
  :func:`~agentic_rl.tools.definition.parser.parse_tool_calls`.
* ``llama3_json``: ``{"name": ..., "parameters": {...}}`` as the whole reply (Llama 3.1-3.3);
  :func:`~agentic_rl.tools.definition.json_calls.parse_llama3_json`.
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (Mistral, Mixtral, Nemo);
  :func:`~agentic_rl.tools.definition.json_calls.parse_mistral`.
* ``pythonic``: ``[name(arg=value)]`` as the whole reply (Llama 3.2 pythonic, Llama 4);
  :func:`~agentic_rl.tools.definition.pythonic_calls.parse_pythonic`.
* ``gemma``: ``tool_code`` fenced blocks of Python calls (Gemma 2/3);
  :func:`~agentic_rl.tools.definition.pythonic_calls.parse_gemma`.
* ``qwen3_coder``: ``<tool_call><function=NAME><parameter=KEY>value</parameter></function>
  </tool_call>`` (Qwen3-Coder, Qwen3.5); :func:`~agentic_rl.tools.definition.xml_calls.parse_qwen3_coder`.

``model.tool_format = "auto"`` reads the format from the chat template's text
(:func:`detect_tool_format`): the markers a template writes or teaches name its format; a template
that shows none (SmolLM2's, DeepSeek-R1's) gets ``hermes``, the format this project's own tool
prompt teaches.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rl.tools.definition.json_calls import (
    PYTHON_TAG,
    TOOL_CALLS,
    parse_llama3_json,
    parse_mistral,
)
from agentic_rl.tools.definition.parser import CLOSE_TAG, OPEN_TAG, parse_tool_calls
from agentic_rl.tools.definition.pythonic_calls import (
    GEMMA_CLOSE,
    GEMMA_OPEN,
    parse_gemma,
    parse_pythonic,
)
from agentic_rl.tools.definition.xml_calls import FUNCTION_OPEN, parse_qwen3_coder
from agentic_rl.types import ToolCall, ToolCallError

__all__ = [
    "ToolFormat",
    "TOOL_FORMATS",
    "TOOL_FORMAT_NAMES",
    "get_tool_format",
    "detect_tool_format",
    "convert_hermes_reply",
]

Parser = Callable[[str, int], tuple[tuple[ToolCall, ...], tuple[ToolCallError, ...]]]


def _py_value(value: Any) -> str:
    """A JSON value written as a Python literal (``repr`` of the decoded value)."""
    return repr(value)


def _py_call(call: ToolCall) -> str:
    args = ", ".join(f"{k}={_py_value(v)}" for k, v in call.arguments.items())
    return f"{call.name}({args})"


def _hermes_calls(calls: Sequence[ToolCall]) -> str:
    return "\n".join(
        f"{OPEN_TAG}{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}"
        f"{CLOSE_TAG}"
        for c in calls
    )


def _llama3_calls(calls: Sequence[ToolCall]) -> str:
    return "; ".join(
        json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls
    )


def _mistral_calls(calls: Sequence[ToolCall]) -> str:
    body = [{"name": c.name, "arguments": c.arguments} for c in calls]
    return TOOL_CALLS + json.dumps(body, ensure_ascii=False)


def _pythonic_calls(calls: Sequence[ToolCall]) -> str:
    return "[" + ", ".join(_py_call(c) for c in calls) + "]"


def _xml_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _qwen3_coder_calls(calls: Sequence[ToolCall]) -> str:
    def one(call: ToolCall) -> str:
        params = "".join(
            f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in call.arguments.items()
        )
        return f"{OPEN_TAG}\n{FUNCTION_OPEN}{call.name}>\n{params}</function>\n{CLOSE_TAG}"

    return "\n".join(one(c) for c in calls)


def _gemma_calls(calls: Sequence[ToolCall]) -> str:
    return "\n".join(f"{GEMMA_OPEN}\n{_py_call(c)}\n{GEMMA_CLOSE}" for c in calls)


@dataclass(frozen=True)
class ToolFormat:
    """One tool-call format.

    Attributes:
        name: the ``model.tool_format`` value.
        parse: ``(text, turn_index) -> (calls, errors)``: pure, never raises, linear time.
        syntax: the call syntax as the tool prompt teaches it (``Tools (call one with …):``).
        write_calls: the calls written in this format (a demonstration's reply).
        calls_own_reply: the calls must be the whole reply (prose before them is dropped when a
            demonstration is converted to this format).
        result_wrapper: how a tool result is shown inside a ``user`` message when the chat
            template has no ``tool`` role (``{content}`` is replaced).
    """

    name: str
    parse: Parser
    syntax: str
    write_calls: Callable[[Sequence[ToolCall]], str]
    calls_own_reply: bool = False
    result_wrapper: str = "<tool_response>\n{content}\n</tool_response>"

    def tools_header(self) -> str:
        """The line before the tool list in the system prompt."""
        return f"Tools (call one with {self.syntax}):"

    def wrap_result(self, content: str) -> str:
        """A tool result as the text of a ``user`` message (templates without a tool role)."""
        return self.result_wrapper.replace("{content}", content)


TOOL_FORMATS: dict[str, ToolFormat] = {
    f.name: f
    for f in (
        ToolFormat(
            "hermes",
            parse_tool_calls,
            f'{OPEN_TAG}{{"name": NAME, "arguments": {{...}}}}{CLOSE_TAG}',
            _hermes_calls,
        ),
        ToolFormat(
            "llama3_json",
            parse_llama3_json,
            '{"name": NAME, "parameters": {...}} as the whole reply',
            _llama3_calls,
            calls_own_reply=True,
        ),
        ToolFormat(
            "mistral",
            parse_mistral,
            f'{TOOL_CALLS}[{{"name": NAME, "arguments": {{...}}}}]',
            _mistral_calls,
            calls_own_reply=True,
        ),
        ToolFormat(
            "pythonic",
            parse_pythonic,
            "[NAME(arg=value, ...)] as the whole reply",
            _pythonic_calls,
            calls_own_reply=True,
        ),
        ToolFormat(
            "gemma",
            parse_gemma,
            f"{GEMMA_OPEN}\\nNAME(arg=value, ...)\\n{GEMMA_CLOSE}",
            _gemma_calls,
            result_wrapper="```tool_output\n{content}\n```",
        ),
        ToolFormat(
            "qwen3_coder",
            parse_qwen3_coder,
            f"{OPEN_TAG}\\n{FUNCTION_OPEN}NAME>\\n<parameter=KEY>\\nvalue\\n</parameter>\\n"
            f"</function>\\n{CLOSE_TAG}",
            _qwen3_coder_calls,
        ),
    )
}
#: the values of ``model.tool_format``
TOOL_FORMAT_NAMES = ("auto", *TOOL_FORMATS)


def get_tool_format(name: str) -> ToolFormat:
    """The format registered under ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name not in TOOL_FORMATS:
        raise ValueError(
            f"unknown tool format {name!r}; known: {', '.join(TOOL_FORMATS)} (or 'auto')"
        )
    return TOOL_FORMATS[name]


#: markers in a chat template's text, in the order they are looked for, and the format they name
_MARKERS: tuple[tuple[str, str], ...] = (
    (FUNCTION_OPEN, "qwen3_coder"),
    (OPEN_TAG, "hermes"),
    (TOOL_CALLS, "mistral"),
    (GEMMA_OPEN, "gemma"),
    ("tool_code", "gemma"),
    (PYTHON_TAG, "llama3_json"),
    ('"parameters": dictionary of argument name', "llama3_json"),
    ("<start_of_turn>", "gemma"),
)


def detect_tool_format(template: str | None) -> str:
    """The tool format a chat template speaks (``model.tool_format = "auto"``).

    Looks for each format's markers in the template's text (:data:`_MARKERS`, first match wins);
    a template without any (or None) gives ``"hermes"``. Never raises.
    """
    text = template or ""
    for marker, name in _MARKERS:
        if marker in text:
            return name
    return "hermes"


def convert_hermes_reply(text: str, fmt: ToolFormat) -> str:
    """A reply written with Hermes ``<tool_call>`` blocks, rewritten in ``fmt``.

    The envs' oracles (and hand-written demonstrations) speak Hermes; a model of another
    format is shown its own syntax. A reply with no Hermes call, or with a malformed one, is
    returned unchanged; so is every reply when ``fmt`` is Hermes. The prose before the first
    call is kept as written (whitespace included), unless ``fmt.calls_own_reply``.
    """
    if fmt.name == "hermes" or OPEN_TAG not in text:
        return text
    calls, errors = parse_tool_calls(text)
    if errors or not calls:
        return text
    prose = text[: text.find(OPEN_TAG)]  # verbatim: a template may show its whitespace again
    written = fmt.write_calls(calls)
    return written if fmt.calls_own_reply else prose + written
