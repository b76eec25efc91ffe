"""Lone surrogates from tools and from the model's JSON are made valid text at one boundary (issue 19, item 2).

A Python str can hold a lone surrogate (``chr(0xd800)``, or ``"\\ud800"`` decoded from JSON); UTF-8
encoders raise on it: the tokenizer, the audit log, the permission policy's size check. The parser
and the tool results replace them with U+FFFD (``agentic_rl.types.valid_text``).
"""

from __future__ import annotations

import json

from agentic_rl.tools import execute_tool_calls, parse_tool_calls, tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.env_tools import SandboxedTools
from agentic_rl.types import Action, ToolCall, valid_text
from tests.markers import needs_bwrap

BAD = "\ud800"
REPLACEMENT = "\ufffd"


@tool
def write_file(path: str, content: str) -> str:
    """Pretend to write a file.

    Args:
        path: where.
        content: what.
    """
    return f"wrote {len(content)} chars to {path}"


@tool
def emit(text: str) -> str:
    """Return the text with a lone surrogate around it.

    Args:
        text: the text.
    """
    return f"{BAD}{text}\udfff"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_valid_text_replaces_lone_surrogates_only():
    assert valid_text("plain") == "plain"
    assert valid_text("é\x00\u2028\ufffe") == "é\x00\u2028\ufffe"  # NUL and other code points stay
    assert valid_text(f"a{BAD}b\udfff") == f"a{REPLACEMENT}b{REPLACEMENT}"
    assert (
        valid_text("\ud83d\ude00") == "\U0001f600"
    )  # a pair held as two code points is one character
    assert valid_text("\ude00\ud83d") == REPLACEMENT * 2  # the wrong order is two lone surrogates


def test_surrogate_escapes_in_call_json_are_replaced():
    text = (
        '<tool_call>{"name": "write_file\\ud800", "arguments": {"path": "a\\ud800.txt", '
        '"\\udfffk": ["\\ud800", ["x\\udbff"]]}}</tool_call>'
    )
    calls, errors = parse_tool_calls(text)
    assert errors == ()
    assert calls[0].name == f"write_file{REPLACEMENT}"
    assert calls[0].arguments == {
        "path": f"a{REPLACEMENT}.txt",
        f"{REPLACEMENT}k": [REPLACEMENT, [f"x{REPLACEMENT}"]],
    }
    assert _encodable(json.dumps(calls[0].arguments, ensure_ascii=False))


def test_raw_surrogates_in_the_message_are_replaced_in_raw_and_errors():
    calls, errors = parse_tool_calls(
        f'<tool_call>{{"name": "a{BAD}"}}</tool_call><tool_call>{{{BAD}</tool_call>'
    )
    assert calls[0].name == f"a{REPLACEMENT}" and _encodable(calls[0].raw)
    assert errors[0].raw == "{" + REPLACEMENT and _encodable(errors[0].message)


def test_call_with_a_surrogate_escape_is_permission_checked_and_audited(tmp_path):
    """The permission check and the audit log raised UnicodeEncodeError: the call was never audited."""
    policy = PermissionPolicy.from_dict(
        {
            "tools": {
                "write_file": {
                    "side_effect": "workspace_write",
                    "paths": {"path": ["workspace/**"]},
                }
            }
        }
    )
    log = AuditLog(tmp_path / "audit.jsonl")
    executor = ToolExecutor({"write_file": write_file}, policy, log)
    text = (
        '<tool_call>{"name": "write_file", "arguments": {"path": "workspace/\\ud800.txt", "content": "x\\udc00"}}'
        '</tool_call><tool_call>{"name": "write_file", "arguments": {"path": "/etc/\\ud800", "content": ""}}'
        "</tool_call>"
    )
    calls, errors = parse_tool_calls(text)
    report = executor.execute(calls, errors, trajectory_id="t", turn=0)
    assert [r.ok for r in report.results] == [True, False]
    assert report.results[0].content == f"wrote 2 chars to workspace/{REPLACEMENT}.txt"
    assert report.results[1].content.startswith("Denied:")
    records = log.read()
    assert [(r["decision"], r["call_id"]) for r in records] == [
        ("allow", "call_0_0"),
        ("deny", "call_0_1"),
    ]
    assert records[0]["arguments"] == {
        "path": f"workspace/{REPLACEMENT}.txt",
        "content": f"x{REPLACEMENT}",
    }


def test_hand_built_call_with_surrogates_is_still_checked_and_audited(tmp_path):
    """Calls not made by the parser (e.g. an API's tool_calls) reach the size check and the log intact."""
    policy = PermissionPolicy.from_dict(
        {"tools": {"write_file": {"mode": "allow"}}, "max_argument_bytes": 10}
    )
    log = AuditLog(tmp_path / "audit.jsonl")
    call = ToolCall("write_file", {"path": BAD, "content": BAD * 4}, raw=BAD, id="call_0_0")
    report = ToolExecutor({"write_file": write_file}, policy, log).execute(
        [call], [], trajectory_id="t", turn=0
    )
    assert (
        report.results[0].content.startswith("Denied:")
        and "over the limit of 10" in report.results[0].content
    )
    (record,) = log.read()
    assert record["decision"] == "deny" and record["raw"] == REPLACEMENT


def test_tool_output_with_surrogates_is_valid_text(tmp_path):
    calls = [ToolCall("emit", {"text": "hi"}, id="call_0_0")]
    (result,) = execute_tool_calls(calls, [], {"emit": emit})
    assert result.content == f"{REPLACEMENT}hi{REPLACEMENT}"
    log = AuditLog(tmp_path / "audit.jsonl")
    policy = PermissionPolicy.allow_all({"emit": "read_only"})
    report = ToolExecutor({"emit": emit}, policy, log, max_chars=3).execute(
        calls, [], trajectory_id="t", turn=0
    )
    assert report.results[0].content == f"{REPLACEMENT}hi…[truncated 1 of 4 chars]"
    assert (
        log.read()[0]["output_bytes"] == 8
    )  # the full output as valid text: U+FFFD is 3 bytes in UTF-8


@needs_bwrap
def test_python_tool_printing_a_lone_surrogate_in_a_real_sandbox(tmp_path):
    """``print(chr(0xd800))`` in the sandboxed interpreter gives valid text, audited."""
    tools = SandboxedTools(SandboxConfig(timeout_s=10.0), audit_path=str(tmp_path / "audit.jsonl"))
    try:
        tools.reset("traj")
        code = "print(chr(0xd800) + 'ok')\nchr(0xdfff)"
        text = (
            "<tool_call>"
            + json.dumps({"name": "python", "arguments": {"code": code}})
            + "</tool_call>"
        )
        calls, errors = parse_tool_calls(text)
        report = tools.execute(Action(text, calls, errors), 0)
    finally:
        tools.close()
    (result,) = report.results
    assert result.ok, result.content
    # the surrogate is shown as U+FFFD (or escaped, by a worker that escapes what it cannot encode): valid text
    assert _encodable(result.content) and "ok" in result.content and BAD not in result.content
    (record,) = AuditLog(tmp_path / "audit.jsonl").read()
    assert record["decision"] == "allow" and record["tool"] == "python"
