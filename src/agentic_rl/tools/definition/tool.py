"""Tools: Python functions the policy can call, with a JSON Schema for their arguments.

A :class:`Tool` pairs a function with the JSON Schema of its keyword arguments. The
:func:`tool` decorator builds one from a type-hinted function with a Google-style docstring::

    @tool
    def add(a: int, b: int = 0) -> int:
        '''Add two integers.

        Args:
            a: first term.
            b: second term.
        '''
        return a + b

    add.schema()   # {"name": "add", "description": "Add two integers.", "parameters": {...}}
    add({"a": 2})  # "2"

:func:`execute_tool_calls` runs the calls parsed from one assistant message and turns every
outcome, including parser errors, unknown tools, bad arguments and exceptions raised by the
tool, into a :class:`~agentic_rl.types.ToolResult` the policy can read. It never raises because
of the model's output: a bad call is an observation, not a crash.

This module imports only the standard library and :mod:`agentic_rl.types`. It does not
sandbox anything: a tool runs in-process with the caller's permissions.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.tools.definition._schema import check_object, schema_from_function
from agentic_rl.tools.definition.parser import in_call_order
from agentic_rl.types import ToolCall, ToolCallError, ToolResult, valid_text

__all__ = [
    "Tool",
    "ToolArgumentError",
    "ToolOutput",
    "tool",
    "execute_tool_calls",
    "DEFAULT_MAX_CHARS",
]

DEFAULT_MAX_CHARS = 2000
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns when it had to cut its own output (the sandbox's ``python`` caps what
    a program prints): the text it passes on and the size of the whole output.

    The executor's truncation notice (:func:`execute_tool_calls`) and the audit record count
    from ``full_chars`` / ``full_bytes``, so the policy and the audit log are told the real size
    of the output, not the size of what the tool kept of it. ``str(output)`` is ``text``.

    Attributes:
        text: the output as the tool passes it on (already cut, with the tool's own notice).
        full_chars: characters of the whole output (>= ``len(text)``).
        full_bytes: UTF-8 bytes of the whole output.
    """

    text: str
    full_chars: int
    full_bytes: int

    def __str__(self) -> str:
        return self.text


class ToolArgumentError(ValueError):
    """The arguments of a tool call do not match the tool's parameter schema.

    The message names the offending argument and is meant to be shown to the policy.
    """


@dataclass(frozen=True)
class Tool:
    """A callable tool with a JSON Schema for its keyword arguments.

    Attributes:
        name: the name the policy uses to call it (1-64 chars of ``[A-Za-z0-9_.-]``).
        description: what the tool does, shown to the policy.
        parameters: JSON Schema of the arguments, an object schema such as
            ``{"type": "object", "properties": {...}, "required": [...],
            "additionalProperties": False}``.
        fn: the function, called as ``fn(**arguments)``.
        risk_detector: optional ``(call, result) -> [risk event, ...]`` that
            :class:`~agentic_rl.tools.governance.executor.ToolExecutor` runs after every allowed call of
            this tool (the sandbox's tools carry one: limit hits, paths outside the workspace);
            not part of the schema.
        audit_status: optional ``(call, result) -> {"status", "ok", "exit_code", "signal"}``
            (or None) that :class:`~agentic_rl.tools.governance.executor.ToolExecutor` writes into the
            audit record of an allowed call that returned, when the tool knows better than
            "it returned" how the call ended (the sandbox's ``python`` tool: ``timeout``,
            ``exited`` with its code, ``killed`` by a signal, ``error``); not part of the schema.

    Raises:
        ValueError: on construction, if ``name`` is invalid or ``parameters`` is not an
            object schema.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    risk_detector: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    audit_status: Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use 1-64 chars of [A-Za-z0-9_.-]")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON Schema object schema")
        if not callable(self.fn):
            raise ValueError(f"tool {self.name!r}: fn must be callable")

    def schema(self) -> dict[str, Any]:
        """Return ``{"name", "description", "parameters"}`` (a deep copy, safe to mutate).

        Never raises.
        """
        return {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }

    def validate(self, arguments: Any) -> None:
        """Check ``arguments`` against the parameter schema.

        Raises:
            ToolArgumentError: ``arguments`` is not a dict, has an unknown key, lacks a
                required key, or a value has the wrong JSON type (an int is a valid number;
                a bool is neither an integer nor a number).
        """
        if not isinstance(arguments, dict):
            kind = type(arguments).__name__
            raise ToolArgumentError(f"arguments must be a JSON object, got {kind}")
        error = check_object(arguments, self.parameters)
        if error:
            raise ToolArgumentError(error)

    def __call__(self, arguments: dict[str, Any]) -> str:
        """Validate ``arguments``, call ``fn(**arguments)`` and return ``str(result)``.

        Raises:
            ToolArgumentError: the arguments do not match the schema (see :meth:`validate`).
            Exception: whatever ``fn`` raises, unchanged.
        """
        return str(self.run(arguments))

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        """As :meth:`__call__`, with the size of the whole output: a :class:`ToolOutput` that
        ``fn`` returned is passed on; any other result is ``str(result)``, whole.

        Raises:
            ToolArgumentError, Exception: as :meth:`__call__`.
        """
        self.validate(arguments)
        out = self.fn(**arguments)
        if isinstance(out, ToolOutput):
            return out
        text = valid_text(str(out))
        return ToolOutput(text, len(text), len(text.encode("utf-8")))


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Decorator that turns a type-hinted function into a :class:`Tool`.

    Use as ``@tool`` or ``@tool(name="other_name")``. The schema comes from the signature:
    ``str`` -> string, ``int`` -> integer, ``float`` -> number, ``bool`` -> boolean,
    ``list[T]`` -> array of T, ``dict`` -> object, ``Literal[...]`` -> enum. Parameters with
    a default or typed ``T | None`` / ``Optional[T]`` are not required (``None`` is then a
    valid value; an omitted optional without default is passed as ``None``). The
    description is the docstring text before its first section (``Args:``, ``Returns:``...);
    the ``Args:`` section gives each parameter's description.

    Returns:
        A :class:`Tool` (or, when called with only keywords, a decorator returning one).

    Raises:
        TypeError: at decoration time, when a parameter has no type hint or an unsupported
            type, is ``*args``/``**kwargs``/positional-only, or the docstring documents a
            parameter the function does not have.
        ValueError: the tool name is invalid (see :class:`Tool`).
    """

    def build(func: Callable[..., Any]) -> Tool:
        description, parameters, fill_none = schema_from_function(func)
        call = functools.partial(func, **dict.fromkeys(fill_none)) if fill_none else func
        return Tool(
            name=name or func.__name__, description=description, parameters=parameters, fn=call
        )

    return build(fn) if fn is not None else build


def _truncate(text: str, max_chars: int, full_chars: int | None = None) -> str:
    """The observation text shown to the policy: ``text`` made valid (lone surrogates -> U+FFFD,
    :func:`~agentic_rl.types.valid_text`), then cut to ``max_chars`` characters with a notice
    ``…[truncated N of M chars]``: M is the size of the whole output (``full_chars`` when the
    tool had already cut it, see :class:`ToolOutput`; else ``len(text)``), N = M - ``max_chars``.
    Every tool result passes here, so tool output is valid text downstream."""
    text = valid_text(text)
    if len(text) <= max_chars:
        return text
    full = len(text) if full_chars is None else max(full_chars, len(text))
    return f"{text[:max_chars]}…[truncated {full - max_chars} of {full} chars]"


def _full(cut: ToolOutput | None) -> int | None:
    """Characters of the whole output of a tool that cut its own (None: the text is whole)."""
    return None if cut is None else cut.full_chars


def _parse_error_result(error: ToolCallError, call_id: str) -> ToolResult:
    """The observation of a call the parser rejected, under the id of its place in the message."""
    return ToolResult(
        call_id=call_id,
        name="",
        content=f"Error: could not parse tool call: {error.message}",
        ok=False,
    )


def _run_one(call: ToolCall, tools: Mapping[str, Tool]) -> tuple[ToolResult, ToolOutput | None]:
    """The call's result (content not yet cut for the policy) and, when the tool cut its own
    output, the :class:`ToolOutput` that gives the size of the whole output (else None)."""
    selected = tools.get(call.name)
    if selected is None:
        available = ", ".join(sorted(tools)) or "none"
        content = f"Error: unknown tool '{call.name}'. Available tools: {available}"
        return ToolResult(call_id=call.id, name="", content=content, ok=False), None
    try:
        output = selected.run(call.arguments)
    except ToolArgumentError as exc:
        return ToolResult(call.id, call.name, f"Error: {exc}", ok=False), None
    except Exception as exc:  # noqa: BLE001 - a failing tool is an observation, not a crash
        return ToolResult(call.id, call.name, f"Error: {type(exc).__name__}: {exc}", False), None
    cut = output if output.full_chars > len(output.text) else None
    return ToolResult(call_id=call.id, name=call.name, content=output.text, ok=True), cut


def execute_tool_calls(
    calls: Sequence[ToolCall],
    errors: Sequence[ToolCallError],
    tools: Mapping[str, Tool],
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> tuple[ToolResult, ...]:
    """Run parsed tool calls and return one :class:`ToolResult` per parser error and per call.

    Order: message order (:func:`~agentic_rl.tools.definition.parser.in_call_order`): each result at the
    place of its ``<tool_call>`` block, a parser error under the id of its block
    (``call_<turn>_<k>``; ``ok=False``, content ``"Error: could not parse tool call: <message>"``).
    For calls with ids not made by the parser the order is unknown: parser errors first (id
    ``""``), then the calls. Outcomes of a call:

    - unknown tool: ``ok=False``, ``"Error: unknown tool 'x'. Available tools: a, b"``;
    - bad arguments: ``ok=False``, ``"Error: <message naming the argument>"``;
    - the tool raised: ``ok=False``, ``"Error: <ExceptionType>: <message>"``;
    - otherwise ``ok=True`` with the tool's output.

    Every content is made valid text (lone surrogates become U+FFFD); one longer than
    ``max_chars`` is cut to ``max_chars`` characters followed by ``"…[truncated N of M chars]"``
    (M = characters of the tool's whole output, counted before any cut, also one the tool made
    itself, see :class:`ToolOutput`; N = M - ``max_chars``).

    Raises:
        ValueError: ``max_chars`` is not positive. Exceptions raised by tools never
            propagate; ``KeyboardInterrupt`` and ``SystemExit`` do (they are not
            ``Exception`` subclasses).
    """
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    results = [
        (_parse_error_result(item, call_id), None)
        if isinstance(item, ToolCallError)
        else _run_one(item, tools)
        for call_id, item in in_call_order(calls, errors)
    ]
    return tuple(
        ToolResult(r.call_id, r.name, _truncate(r.content, max_chars, _full(cut)), r.ok)
        for r, cut in results
    )
