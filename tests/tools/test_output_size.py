"""A cut tool output tells the policy and the audit log the real size of the output (issue 39,
item 11).

Before: a program printing 5,000,001 characters reached the model as 2,000 characters ending
``…[truncated 18019 chars]``, the count of the sandbox's 20,000-character cap (plus its notice),
and the audit log said ``output_bytes: 20019``. The sandbox now counts what its caps cut
(``ExecResult.dropped_chars``/``dropped_bytes``), the ``python`` tool passes the whole size on
(:class:`~agentic_rl.tools.definition.tool.ToolOutput`), and the executor's notice and audit
record count from it.
"""

from __future__ import annotations

import shutil

import pytest

from agentic_rl.tools import execute_tool_calls
from agentic_rl.tools.definition.tool import Tool, ToolOutput
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.env_tools import SandboxedTools
from agentic_rl.types import Action, ToolCall
from tests.markers import BWRAP_SKIP_REASON

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)


def _cut_tool(text: str, full_chars: int, full_bytes: int) -> Tool:
    return Tool(
        "cut",
        "returns an output it cut itself",
        {"type": "object", "properties": {}},
        lambda: ToolOutput(text, full_chars, full_bytes),
    )


def test_the_notice_counts_from_the_whole_output_of_a_tool_that_cut_it():
    tools = {"cut": _cut_tool("a" * 30 + "[cut by the tool]", 1000, 1000)}
    (result,) = execute_tool_calls([ToolCall("cut", {}, id="c")], [], tools, max_chars=10)
    assert result.content == "a" * 10 + "…[truncated 990 of 1000 chars]"
    # shown whole when it fits: the tool's own notice stays
    (result,) = execute_tool_calls([ToolCall("cut", {}, id="c")], [], tools, max_chars=100)
    assert result.content == "a" * 30 + "[cut by the tool]"


def test_the_audit_record_has_the_whole_size(tmp_path):
    tools = {"cut": _cut_tool("é" * 20, 5000, 10_000)}
    audit = AuditLog(tmp_path / "audit.jsonl")
    executor = ToolExecutor(tools, PermissionPolicy.allow_all({"cut": "read_only"}), audit)
    report = executor.execute([ToolCall("cut", {}, id="c")], [], trajectory_id="t", turn=0)
    (result,) = report.results
    assert result.content == "é" * 20  # fits max_chars: the tool's text as it is
    (record,) = audit.read()
    assert record["output_bytes"] == 10_000 and record["truncated"] is True


@needs_bwrap
@pytest.mark.parametrize(
    ("code", "chars", "size"),
    [
        ("print('x' * 5_000_000)", 5_000_001, 5_000_001),  # print: cut in the kernel
        ("import os\n_ = os.write(1, b'y' * 3_000_000)", 3_000_000, 3_000_000),  # by the supervisor
        ("print('é' * 1_000_000)", 1_000_001, 2_000_001),  # characters and bytes differ
        # a value: "Out: " + the repr (2,000,002) + the repr's own cut mark "…[truncated]" (12)
        ("'z' * 2_000_000", 2_000_019, 2_000_021),
    ],
)
def test_a_huge_python_output_reaches_the_policy_with_its_real_size(tmp_path, code, chars, size):
    tools = SandboxedTools(SandboxConfig(timeout_s=20.0), audit_path=str(tmp_path / "audit.jsonl"))
    try:
        tools.reset("t")
        action = Action("", tool_calls=(ToolCall("python", {"code": code}, id="call_0_0"),))
        (result,) = tools.execute(action, 0).results
    finally:
        tools.close()
    assert result.content.endswith(f"…[truncated {chars - 2000} of {chars} chars]")
    (record,) = AuditLog(tmp_path / "audit.jsonl").read()
    assert record["output_bytes"] == size and record["truncated"] is True


@needs_bwrap
def test_the_sandbox_notice_says_how_much_was_cut():
    tools = SandboxedTools(SandboxConfig(timeout_s=20.0, max_output_chars=100), max_chars=10_000)
    try:
        tools.reset("t")
        action = Action("", tool_calls=(ToolCall("python", {"code": "print('q' * 250)"}, id="c"),))
        (result,) = tools.execute(action, 0).results
    finally:
        tools.close()
    assert result.content == "q" * 100 + "\n[output truncated: 151 more characters not shown]"


@needs_bwrap
def test_a_long_file_read_reaches_the_policy_with_its_real_size(tmp_path):
    """read_file cuts at ``max_read_chars`` (100,000) itself; the notice counts the whole file."""
    tools = SandboxedTools(SandboxConfig(timeout_s=20.0), audit_path=str(tmp_path / "audit.jsonl"))
    try:
        tools.reset("t")
        assert tools.sandbox is not None
        (tools.sandbox.workspace / "big.txt").write_text("é" * 300_000 + "\n", encoding="utf-8")
        call = ToolCall("read_file", {"path": "big.txt"}, id="call_0_0")
        (result,) = tools.execute(Action("", tool_calls=(call,)), 0).results
    finally:
        tools.close()
    assert result.content == "é" * 2000 + "…[truncated 298001 of 300001 chars]"
    (record,) = AuditLog(tmp_path / "audit.jsonl").read()
    assert record["output_bytes"] == 600_001 and record["truncated"] is True
