"""Parsers of the Python-call tool formats: ``pythonic`` (Llama 3.2/4) and ``gemma`` (Gemma 3).

Same contract as :func:`agentic_rl.tools.definition.parser.parse_tool_calls`: pure, never raises,
linear in the text, valid text everywhere, ids ``call_<turn>_<k>`` over every call position.

``pythonic``: the whole reply (after whitespace, an optional ``<|python_start|>`` and before an
optional ``<|python_end|>``) is a Python list of calls::

    [calculator(expression="2+2"), search(query="rain", k=3)]

A reply that does not start with ``[`` holds no call.

``gemma`` (the function-calling convention of Google's Gemma 3 guide): each call is a Python call
in a fenced ``tool_code`` block, anywhere in the reply; results come back in ``tool_output``
blocks::

    ```tool_code
    calculator(expression="2+2")
    ```

Each ``` ```tool_code ``` opens a block that ends at the next ```` ``` ```` (or the end of the
text); a block may hold several calls, one statement each.

Calls are read with :func:`ast.parse`, never evaluated: a call is ``NAME(key=literal, ...)`` (a
dotted name is kept whole), every argument a keyword argument whose value is a Python literal
(:func:`ast.literal_eval`: strings, numbers, ``True``/``False``/``None``, lists, tuples, dicts,
sets); a positional argument, ``*args``/``**kwargs``, a non-literal value or a statement that is
not a call is an error of that call. Text that is not Python (a syntax error, a NUL byte, nesting
past the parser's limit, an integer over Python's digit limit) makes the whole list (or block)
one error. ``null``/``true``/``false`` are read as Python's ``None``/``True``/``False``, since
models trained on JSON write them.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from agentic_rl.types import ToolCall, ToolCallError, valid_text

__all__ = [
    "parse_pythonic",
    "parse_gemma",
    "GEMMA_OPEN",
    "GEMMA_CLOSE",
    "PYTHONIC_HINT",
    "GEMMA_HINT",
]

GEMMA_OPEN = "```tool_code"
GEMMA_CLOSE = "```"
PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
PYTHONIC_HINT = 'expected [name(arg="value", ...)] as the whole reply'
GEMMA_HINT = f'expected {GEMMA_OPEN}\\nname(arg="value"){GEMMA_CLOSE}'
_SPACE = re.compile(r"\s*")
_JSON_NAMES = {"null": None, "true": True, "false": False}
_PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError, TypeError)
_Parsed = tuple[tuple[ToolCall, ...], tuple[ToolCallError, ...]]


def _name(node: ast.expr) -> str | None:
    """``a`` or ``a.b.c`` of a call's function, None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _literal(node: ast.expr) -> Any:
    """A keyword value as a Python value (``null``/``true``/``false`` as JSON means them).

    Raises:
        ValueError, TypeError, SyntaxError, RecursionError, MemoryError: not a literal.
    """
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    return ast.literal_eval(node)


def _plain(value: Any) -> Any:
    """``value`` as JSON data: tuples/sets as lists, every string valid text (iterative: any depth).

    Raises:
        ValueError: a value JSON cannot hold (bytes, complex, Ellipsis) or a non-string dict key.
    """
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        item = holder[key]
        if isinstance(item, str):
            holder[key] = valid_text(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            items = list(item)
            holder[key] = items
            stack.extend((items, i) for i in range(len(items)))
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise ValueError("dict keys must be strings")
            out = {valid_text(k): v for k, v in item.items()}
            holder[key] = out
            stack.extend((out, k) for k in out)
        elif item is not None and not isinstance(item, (bool, int, float)):
            raise ValueError(f"{type(item).__name__} is not JSON data")
    return root[0]


def _raw(node: ast.AST) -> str:
    """The call's text as :func:`ast.unparse` writes it (linear in the node; the source slice
    would cost a scan of the whole source per call)."""
    try:
        return valid_text(ast.unparse(node))
    except _PARSE_ERRORS:
        return ""


def _call(node: ast.expr, turn_index: int, k: int) -> ToolCall | ToolCallError:
    """The tool call of one parsed expression, or its error."""
    raw = _raw(node)
    if not isinstance(node, ast.Call):
        return ToolCallError(raw=raw, message=f"not a function call; {PYTHONIC_HINT}")
    name = _name(node.func)
    if name is None:
        return ToolCallError(raw=raw, message="the called function must be a name")
    if node.args or any(kw.arg is None for kw in node.keywords):
        return ToolCallError(
            raw=raw, message=f"{name}: give every argument by name (name=value), no positional"
        )
    arguments: dict[str, Any] = {}
    for kw in node.keywords:
        try:
            arguments[valid_text(kw.arg)] = _plain(_literal(kw.value))
        except _PARSE_ERRORS:
            return ToolCallError(
                raw=raw, message=f"{name}: the value of {kw.arg!r} is not a literal"
            )
    return ToolCall(
        name=valid_text(name), arguments=arguments, raw=raw, id=f"call_{turn_index}_{k}"
    )


def _parse(source: str, mode: str) -> ast.AST | str:
    """``ast.parse(source, mode=mode)`` or the error message."""
    try:
        return ast.parse(source, mode=mode)
    except _PARSE_ERRORS as exc:
        detail = getattr(exc, "msg", None) or type(exc).__name__
        return f"not valid Python ({detail})"


def _split(items: list[ToolCall | ToolCallError]) -> _Parsed:
    calls = tuple(i for i in items if isinstance(i, ToolCall))
    errors = tuple(i for i in items if isinstance(i, ToolCallError))
    return calls, errors


def parse_pythonic(text: str, turn_index: int = 0) -> _Parsed:
    """Parse a pythonic tool-call reply ``[f(a=1), g(b="x")]`` (format: module docstring).

    Returns:
        ``(calls, errors)`` in list order; ``((), ())`` when the reply does not start with ``[``.

    Never raises, for any ``text``.
    """
    text = valid_text(text)
    body = text.strip()
    if body.startswith(PYTHON_START):
        body = body[len(PYTHON_START) :].lstrip()
    if body.endswith(PYTHON_END):
        body = body[: -len(PYTHON_END)].rstrip()
    if not body.startswith("["):
        return (), ()
    tree = _parse(body, "eval")
    if isinstance(tree, str):
        return (), (ToolCallError(raw=body, message=f"{tree}; {PYTHONIC_HINT}"),)
    node = tree.body  # type: ignore[attr-defined]
    if not isinstance(node, ast.List):
        return (), (ToolCallError(raw=body, message=f"not a list of calls; {PYTHONIC_HINT}"),)
    return _split([_call(e, turn_index, k) for k, e in enumerate(node.elts)])


def parse_gemma(text: str, turn_index: int = 0) -> _Parsed:
    """Parse every ````` ```tool_code ````` block of a Gemma reply (format: module docstring).

    Returns:
        ``(calls, errors)`` in message order.

    Never raises, for any ``text``.
    """
    text = valid_text(text)
    items: list[ToolCall | ToolCallError] = []
    pos = text.find(GEMMA_OPEN)
    while pos != -1:
        body = pos + len(GEMMA_OPEN)
        close = text.find(GEMMA_CLOSE, body)
        block = text[body:] if close == -1 else text[body:close]
        if close == -1:
            items.append(ToolCallError(raw=block.strip(), message=f"unclosed block; {GEMMA_HINT}"))
            break
        items.extend(_block_calls(block.strip(), turn_index, len(items)))
        pos = text.find(GEMMA_OPEN, close + len(GEMMA_CLOSE))
    return _split(items)


def _block_calls(source: str, turn_index: int, k: int) -> list[ToolCall | ToolCallError]:
    """The calls of one ``tool_code`` block (one per statement)."""
    if not source:
        return [ToolCallError(raw="", message=f"empty tool call; {GEMMA_HINT}")]
    tree = _parse(source, "exec")
    if isinstance(tree, str):
        return [ToolCallError(raw=source, message=f"{tree}; {GEMMA_HINT}")]
    out: list[ToolCall | ToolCallError] = []
    for statement in tree.body:  # type: ignore[attr-defined]
        if isinstance(statement, ast.Expr):
            out.append(_call(statement.value, turn_index, k + len(out)))
        else:
            out.append(
                ToolCallError(raw=_raw(statement), message=f"not a function call; {GEMMA_HINT}")
            )
    return out
