"""Tests for agentic_rl.tools.definition.tool: Tool, the @tool decorator, execute_tool_calls."""

from __future__ import annotations

from typing import Literal

import pytest

from agentic_rl.tools import Tool, ToolArgumentError, execute_tool_calls, tool
from agentic_rl.types import ToolCall, ToolCallError, ToolResult


@tool
def sample(
    count: int,
    ratio: float,
    label: str,
    flag: bool,
    values: list[int],
    note: str | None,
    limit: int | None = None,
    scale: float = 1.5,
) -> str:
    """Do a sample thing with many parameters.

    The description may span
    several lines.

    Args:
        count: how many.
        ratio: a ratio,
            described on two lines.
        label (str): a label.
        flag: a flag.
        values: some integers.
        note: an optional note.
        limit: an optional limit.
        scale: a scale.

    Returns:
        A summary string.
    """
    return f"{count}|{ratio}|{label}|{flag}|{values}|{note}|{limit}|{scale}"


def test_decorator_builds_schema():
    assert isinstance(sample, Tool)
    schema = sample.schema()
    assert schema["name"] == "sample"
    assert schema["description"] == (
        "Do a sample thing with many parameters. The description may span several lines."
    )
    params = schema["parameters"]
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    assert params["required"] == ["count", "ratio", "label", "flag", "values"]
    props = params["properties"]
    assert props["count"] == {"type": "integer", "description": "how many."}
    assert props["ratio"] == {"type": "number", "description": "a ratio, described on two lines."}
    assert props["label"] == {"type": "string", "description": "a label."}
    assert props["flag"] == {"type": "boolean", "description": "a flag."}
    assert props["values"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "some integers.",
    }
    assert props["note"] == {"type": ["string", "null"], "description": "an optional note."}
    assert props["limit"] == {"type": ["integer", "null"], "description": "an optional limit."}
    assert props["scale"] == {"type": "number", "description": "a scale.", "default": 1.5}


def test_schema_is_a_copy():
    sample.schema()["parameters"]["properties"].clear()
    assert "count" in sample.schema()["parameters"]["properties"]


def test_call_fills_defaults_and_omitted_optionals():
    out = sample({"count": 2, "ratio": 3, "label": "x", "flag": True, "values": [1, 2]})
    assert out == "2|3|x|True|[1, 2]|None|None|1.5"  # int accepted for number
    out = sample(
        {
            "count": 2,
            "ratio": 0.5,
            "label": "x",
            "flag": False,
            "values": [],
            "note": None,
            "limit": 7,
            "scale": 2.0,
        }
    )
    assert out == "2|0.5|x|False|[]|None|7|2.0"


BASE = {"count": 1, "ratio": 1.0, "label": "a", "flag": True, "values": [1]}


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"extra": 1}, "unknown argument 'extra'"),
        ({"count": None}, "argument 'count': expected integer, got null"),
        ({"count": "3"}, "argument 'count': expected integer, got string"),
        ({"count": 1.5}, "argument 'count': expected integer, got number"),
        ({"count": True}, "argument 'count': expected integer, got boolean"),
        ({"ratio": False}, "argument 'ratio': expected number, got boolean"),
        ({"label": 3}, "argument 'label': expected string, got integer"),
        ({"flag": 1}, "argument 'flag': expected boolean, got integer"),
        ({"values": {"a": 1}}, "argument 'values': expected array, got object"),
        ({"values": [1, "2"]}, "argument 'values[1]': expected integer, got string"),
        ({"note": 5}, "argument 'note': expected string or null, got integer"),
    ],
)
def test_argument_validation_errors(change, fragment):
    with pytest.raises(ToolArgumentError) as info:
        sample({**BASE, **change})
    assert fragment in str(info.value)


def test_missing_required_argument():
    args = dict(BASE)
    del args["label"]
    with pytest.raises(ToolArgumentError, match="missing required argument 'label'"):
        sample(args)


def test_arguments_must_be_a_dict():
    with pytest.raises(ToolArgumentError, match="must be a JSON object"):
        sample([1, 2])


def test_decorator_with_name_and_literal_and_dict():
    @tool(name="lookup")
    def find(mode: Literal["fast", "exact"], options: dict[str, int] | None = None) -> str:
        """Look something up."""
        return f"{mode} {options}"

    assert find.name == "lookup"
    props = find.parameters["properties"]
    assert props["mode"] == {"type": "string", "enum": ["fast", "exact"]}
    assert props["options"] == {"type": ["object", "null"]}
    assert find({"mode": "fast"}) == "fast None"
    with pytest.raises(ToolArgumentError, match='must be one of "fast", "exact"'):
        find({"mode": "slow"})


def test_decorator_rejects_missing_hint():
    with pytest.raises(TypeError, match="parameter 'x' has no type hint"):

        @tool
        def bad(x) -> str:  # noqa: ANN001
            """Bad."""
            return x


@pytest.mark.parametrize("hint", [object, tuple, set[int], "int | str", "dict[int, str]"])
def test_decorator_rejects_unsupported_types(hint):
    def bad(x):
        """Bad."""

    bad.__annotations__ = {"x": hint}
    with pytest.raises(TypeError, match="parameter 'x'"):
        tool(bad)


def test_decorator_rejects_var_args_and_unknown_documented_params():
    with pytest.raises(TypeError, match="not supported"):

        @tool
        def var(*args: int) -> int:
            """Var."""
            return 0

    with pytest.raises(TypeError, match="unknown parameter"):

        @tool
        def typo(x: int) -> int:
            """Typo.

            Args:
                y: not a parameter.
            """
            return x


def test_tool_constructor_validates():
    with pytest.raises(ValueError, match="invalid tool name"):
        Tool(name="has space", description="", parameters={"type": "object"}, fn=print)
    with pytest.raises(ValueError, match="object schema"):
        Tool(name="ok", description="", parameters={"type": "string"}, fn=print)


@tool
def explode(message: str) -> str:
    """Always fail.

    Args:
        message: the error message.
    """
    raise RuntimeError(message)


@tool
def shout(text: str) -> str:
    """Repeat text in upper case."""
    return text.upper()


TOOLS = {"explode": explode, "shout": shout}


def test_execute_tool_calls_all_outcomes():
    calls = [
        ToolCall(name="shout", arguments={"text": "hi"}, id="call_0_0"),
        ToolCall(name="explode", arguments={"message": "boom"}, id="call_0_1"),
        ToolCall(name="shout", arguments={"txt": "hi"}, id="call_0_2"),
        ToolCall(name="nope", arguments={}, id="call_0_3"),
    ]
    errors = [ToolCallError(raw="{bad", message="invalid JSON")]
    results = execute_tool_calls(calls, errors, TOOLS)
    assert results == (  # message order: the calls' ids hold blocks 0-3, so the error was block 4
        ToolResult("call_0_0", "shout", "HI", ok=True),
        ToolResult("call_0_1", "explode", "Error: RuntimeError: boom", ok=False),
        ToolResult("call_0_2", "shout", "Error: unknown argument 'txt' (expected: text)", ok=False),
        ToolResult(
            "call_0_3", "", "Error: unknown tool 'nope'. Available tools: explode, shout", ok=False
        ),
        ToolResult("call_0_4", "", "Error: could not parse tool call: invalid JSON", ok=False),
    )


def test_execute_truncates_long_output():
    calls = [ToolCall(name="shout", arguments={"text": "a" * 2500}, id="c")]
    (result,) = execute_tool_calls(calls, [], TOOLS)
    assert result.content == "A" * 2000 + "…[truncated 500 of 2500 chars]"
    (result,) = execute_tool_calls(calls, [], TOOLS, max_chars=10)
    assert result.content == "A" * 10 + "…[truncated 2490 of 2500 chars]"
    (result,) = execute_tool_calls(calls, [], TOOLS, max_chars=2500)
    assert result.content == "A" * 2500


def test_execute_with_no_calls_and_no_tools():
    assert execute_tool_calls([], [], {}) == ()
    (result,) = execute_tool_calls([ToolCall(name="x", arguments={}, id="c")], [], {})
    assert result.content == "Error: unknown tool 'x'. Available tools: none"
    with pytest.raises(ValueError, match="max_chars"):
        execute_tool_calls([], [], {}, max_chars=0)


def test_hand_written_schema_with_nested_object():
    point = Tool(
        name="move",
        description="Move to a point.",
        parameters={
            "type": "object",
            "properties": {
                "to": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x", "y"],
                    "additionalProperties": False,
                }
            },
            "required": ["to"],
            "additionalProperties": False,
        },
        fn=lambda to: f"{to['x']},{to['y']}",
    )
    assert point({"to": {"x": 1, "y": 2.5}}) == "1,2.5"
    with pytest.raises(ToolArgumentError, match="missing required argument 'to.y'"):
        point({"to": {"x": 1}})
    with pytest.raises(ToolArgumentError, match="argument 'to.x': expected number, got string"):
        point({"to": {"x": "1", "y": 2}})
    with pytest.raises(ToolArgumentError, match="unknown argument 'to.z'"):
        point({"to": {"x": 1, "y": 2, "z": 3}})
