"""Several tool calls in one message: results come back in message order, each error under its own call's id."""

from __future__ import annotations

import json

from agentic_rl.tools import calculator, execute_tool_calls, parse_tool_calls
from agentic_rl.tools.definition.parser import in_call_order
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import ToolCall, ToolCallError


def _good(expression: str) -> str:
    return (
        "<tool_call>"
        + json.dumps({"name": "calculator", "arguments": {"expression": expression}})
        + "</tool_call>"
    )


# good, malformed, good
MESSAGE = f'First {_good("2+3")} then <tool_call>{{"name": "calculator", oops}}</tool_call> and {_good("6*7")}'


def test_parser_ids_count_every_block():
    calls, errors = parse_tool_calls(MESSAGE, turn_index=4)
    assert [c.id for c in calls] == ["call_4_0", "call_4_2"]
    assert len(errors) == 1 and "invalid JSON" in errors[0].message
    order = in_call_order(calls, errors)
    assert [(cid, type(item).__name__) for cid, item in order] == [
        ("call_4_0", "ToolCall"),
        ("call_4_1", "ToolCallError"),
        ("call_4_2", "ToolCall"),
    ]


def test_execute_tool_calls_returns_results_in_call_order():
    calls, errors = parse_tool_calls(MESSAGE, turn_index=4)
    results = execute_tool_calls(calls, errors, {"calculator": calculator})
    assert [(r.call_id, r.ok) for r in results] == [
        ("call_4_0", True),
        ("call_4_1", False),
        ("call_4_2", True),
    ]
    assert [results[0].content, results[2].content] == ["5", "42"]
    assert results[1].content.startswith("Error: could not parse tool call: invalid JSON")


def test_executor_results_and_audit_records_in_call_order(tmp_path):
    calls, errors = parse_tool_calls(MESSAGE, turn_index=1)
    log = AuditLog(tmp_path / "audit.jsonl")
    executor = ToolExecutor(
        {"calculator": calculator}, PermissionPolicy.allow_all({"calculator": "read_only"}), log
    )
    report = executor.execute(calls, errors, trajectory_id="t", turn=1)
    assert [(r.call_id, r.ok, r.content[:6]) for r in report.results] == [
        ("call_1_0", True, "5"),
        ("call_1_1", False, "Error:"),
        ("call_1_2", True, "42"),
    ]
    records = log.read()
    assert [(r["call_id"], r["status"]) for r in records] == [
        ("call_1_0", "ok"),
        ("call_1_1", "parse_error"),
        ("call_1_2", "ok"),
    ]
    assert records[1]["raw"] == '{"name": "calculator", oops}'


def test_errors_only_take_the_turn_of_the_executor():
    _, errors = parse_tool_calls("<tool_call>{bad</tool_call><tool_call></tool_call>", turn_index=3)
    report = ToolExecutor({}, PermissionPolicy()).execute((), errors, trajectory_id="t", turn=3)
    assert [r.call_id for r in report.results] == ["call_3_0", "call_3_1"]
    assert [r.call_id for r in execute_tool_calls((), errors, {})] == [
        "",
        "",
    ]  # no turn known: no id


def test_errors_before_between_and_after_calls():
    text = (
        "<tool_call>{</tool_call>"
        + _good("1")
        + "<tool_call>[]</tool_call><tool_call>x"
        + _good("2")
        + "<tool_call>"
    )
    calls, errors = parse_tool_calls(text)
    kinds = [
        "call" if isinstance(item, ToolCall) else "error"
        for _, item in in_call_order(calls, errors)
    ]
    assert kinds == ["error", "call", "error", "error", "call", "error"]
    assert [cid for cid, _ in in_call_order(calls, errors)] == [f"call_0_{k}" for k in range(6)]


def test_hand_built_ids_fall_back_to_errors_first():
    calls = [
        ToolCall("calculator", {"expression": "1"}, id="a"),
        ToolCall("calculator", {"expression": "2"}, id="b"),
    ]
    errors = [ToolCallError("{", "invalid JSON")]
    assert [cid for cid, _ in in_call_order(calls, errors)] == ["", "a", "b"]
    # ids of the parser's form but out of order or of two turns are not positions either
    calls = [ToolCall("c", {}, id="call_0_1"), ToolCall("c", {}, id="call_0_0")]
    assert [cid for cid, _ in in_call_order(calls, errors)] == ["", "call_0_1", "call_0_0"]
    calls = [ToolCall("c", {}, id="call_0_0"), ToolCall("c", {}, id="call_1_1")]
    assert [cid for cid, _ in in_call_order(calls, errors)] == ["", "call_0_0", "call_1_1"]
