"""JSON Schema helpers for tools: build a schema from a Python signature, check values against it.

Private module used by :mod:`agentic_rl.tools.definition.tool`. Only the small subset of JSON Schema that
tool parameters need is supported: ``type`` (a name or a list of names), ``items``,
``properties``/``required``/``additionalProperties`` and ``enum``.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any

_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Returns?|Yields?|Raises|Examples?|"
    r"Notes?|Attributes|See Also|Warnings?|Todo|References):\s*$"
)
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


# ---------------------------------------------------------------- validation


def json_type_name(value: Any) -> str:
    """Name of the JSON type of a decoded JSON value ("null", "boolean", "integer", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _matches(value: Any, type_name: str) -> bool:
    actual = json_type_name(value)
    if type_name == "number":
        return actual in ("integer", "number")  # an int is a valid number, a bool is not
    return actual == type_name


def check_value(value: Any, schema: dict[str, Any], path: str) -> str | None:
    """Return an error message if ``value`` does not satisfy ``schema``, else None.

    ``path`` names the value in the message (e.g. ``xs[2]`` -> ``argument 'xs[2]': ...``).
    Never raises.
    """
    where = f"argument '{path}'"
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_matches(value, n) for n in names):
            return f"{where}: expected {' or '.join(names)}, got {json_type_name(value)}"
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(json.dumps(v) for v in schema["enum"])
        return f"{where}: must be one of {options}, got {json.dumps(value, default=str)}"
    if isinstance(value, (list, tuple)) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            error = check_value(item, schema["items"], f"{path}[{i}]")
            if error:
                return error
    if isinstance(value, dict) and "properties" in schema:
        return check_object(value, schema, prefix=f"{path}.")
    return None


def check_object(value: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> str | None:
    """Check an object against an object schema: unknown keys, missing required keys, types.

    Returns the first error message, or None when ``value`` is valid. Never raises.
    """
    properties: dict[str, Any] = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        for key in value:
            if key not in properties:
                allowed = ", ".join(properties) or "none"
                return f"unknown argument '{prefix}{key}' (expected: {allowed})"
    for key in schema.get("required", []):
        if key not in value:
            return f"missing required argument '{prefix}{key}'"
    for key, sub in value.items():
        if key in properties:
            error = check_value(sub, properties[key], f"{prefix}{key}")
            if error:
                return error
    return None


# ---------------------------------------------------------------- building from a function


def type_to_schema(hint: Any, where: str) -> tuple[dict[str, Any], bool]:
    """Map a type hint to ``(json_schema, nullable)``.

    Supported: str, int, float, bool, list / list[T], dict / dict[str, T], Literal[...] of
    JSON scalars, and ``Optional[T]`` / ``T | None`` (returns nullable=True).

    Raises:
        TypeError: for any other hint (``where`` names the parameter in the message).
    """
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) != 1 or len(typing.get_args(hint)) != 2:
            raise TypeError(f"{where}: unsupported type {hint!r} (only T | None unions)")
        schema, _ = type_to_schema(members[0], where)
        return schema, True
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}, False
    if hint is list or origin is list:
        args = typing.get_args(hint)
        if not args:
            return {"type": "array"}, False
        items, nullable = type_to_schema(args[0], where)
        if nullable:
            raise TypeError(f"{where}: unsupported type {hint!r} (optional list items)")
        return {"type": "array", "items": items}, False
    if hint is dict or origin is dict:
        args = typing.get_args(hint)
        if args and args[0] is not str:
            raise TypeError(f"{where}: unsupported type {hint!r} (JSON object keys are str)")
        return {"type": "object"}, False
    if origin is typing.Literal:
        values = list(typing.get_args(hint))
        kinds = {_SCALARS.get(type(v)) for v in values}
        if None in kinds or len(kinds) != 1:
            raise TypeError(f"{where}: Literal values must be str, int, float or bool of one type")
        return {"type": kinds.pop(), "enum": values}, False
    raise TypeError(f"{where}: unsupported type {hint!r}; use str, int, float, bool, list, dict")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {parameter: description}).

    The description is all text before the first section header (``Args:``, ``Returns:``,
    ``Raises:``, ...), with whitespace collapsed. Never raises.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        header = _SECTION.match(line)  # headers are unindented after cleandoc
        if header:
            section, indent, current = header.group(1), None, None
            continue
        if section is None:
            description.append(stripped)
        elif section in ("Args", "Arguments", "Parameters", "Params", "Keyword Args") and stripped:
            level = len(line) - len(line.lstrip())
            if indent is None:
                indent = level
            match = _ARG_LINE.match(stripped)
            if level <= indent and match:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
    return " ".join(" ".join(description).split()), params


def schema_from_function(fn: Callable[..., Any]) -> tuple[str, dict[str, Any], list[str]]:
    """Build (description, parameters_schema, optional_without_default) from ``fn``.

    ``optional_without_default`` lists ``T | None`` parameters that have no default value;
    the caller must pass None for them when the model leaves them out.

    Raises:
        TypeError: a parameter has no type hint or an unsupported one, is ``*args``,
            ``**kwargs`` or positional-only, or the ``Args:`` section documents a
            parameter the function does not have.
    """
    description, docs = parse_docstring(fn.__doc__)
    hints = typing.get_type_hints(fn)
    signature = inspect.signature(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    optional_without_default: list[str] = []
    label = getattr(fn, "__qualname__", repr(fn))
    for pname, param in signature.parameters.items():
        where = f"{label}: parameter '{pname}'"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"{where}: *args, **kwargs and positional-only are not supported")
        if pname not in hints:
            raise TypeError(f"{where} has no type hint")
        schema, nullable = type_to_schema(hints[pname], where)
        if nullable:
            schema["type"] = [schema["type"], "null"]
        if pname in docs and docs[pname]:
            schema["description"] = docs[pname]
        has_default = param.default is not param.empty
        if has_default and param.default is not None and _is_json(param.default):
            schema["default"] = param.default
        if not has_default and not nullable:
            required.append(pname)
        if nullable and not has_default:
            optional_without_default.append(pname)
        properties[pname] = schema
    unknown = sorted(set(docs) - set(properties))
    if unknown:
        raise TypeError(f"{label}: docstring documents unknown parameter(s) {', '.join(unknown)}")
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return description, parameters, optional_without_default


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
