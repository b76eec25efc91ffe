"""Sandbox limit hits and paths outside the workspace become risk events, and the rubric counts them."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import run_episodes
from agentic_rl.rollout.engine import RolloutConfig
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.tools.governance.risk_detector import limit_hits, path_escape
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.python_tool import ExecResult
from agentic_rl.types import StopReason, ToolCall
from tests.markers import BWRAP_SKIP_REASON
from tests.tools.python_env import PythonScratchEnv

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)


# -- pure checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result, hits",
    [
        (ExecResult(stdout="ok"), []),
        (ExecResult(timed_out=True, exit_status=137), ["timeout"]),
        (ExecResult(memory_exceeded=True, exception="MemoryError"), ["memory"]),
        (ExecResult(output_truncated=True), ["output_truncated"]),
        (
            ExecResult(
                exception="BlockingIOError",
                stderr="BlockingIOError: [Errno 11] Resource temporarily unavailable",
            ),
            ["processes"],
        ),
        (
            ExecResult(exception="OSError", stderr="OSError: [Errno 27] File too large"),
            ["file_size"],
        ),
        (
            ExecResult(exception="OSError", stderr="OSError: [Errno 24] Too many open files: 'x'"),
            ["open_files"],
        ),
        (
            ExecResult(exit_status=152, signal="SIGXCPU", cpu_exceeded=True),
            ["cpu"],
        ),  # 128 + SIGXCPU (24)
        (
            ExecResult(exit_status=152),
            [],
        ),  # os._exit(152): the program's choice, not a CPU-limit kill
        (ExecResult(stdout="[Errno 27] printed, not raised"), []),
        (ExecResult(exit_status=3), []),  # os._exit(3) is the program's choice, not a limit
    ],
)
def test_limit_hits(result, hits):
    assert limit_hits(result) == hits


def test_path_escape_text_and_symlinks(tmp_path):
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    os.symlink("/etc", root / "etc_link")
    os.symlink("d", root / "inner_link")
    os.symlink("../..", root / "d" / "up")
    for inside in ("a.txt", "d/x", "d/../a.txt", ".", "", "inner_link/x", "missing/dir/f", 3, None):
        assert path_escape(root, inside) is None, inside
    assert "absolute" in path_escape(root, "/etc/passwd")
    assert "absolute" in path_escape(root, "~/.ssh/id_rsa")
    assert "climbs out" in path_escape(root, "../x")
    assert "climbs out" in path_escape(root, "d/../../x")
    assert "symbolic link" in path_escape(root, "etc_link/passwd")
    assert "symbolic link" in path_escape(root, "d/up/secret")


# -- the executor with the sandbox's tools ---------------------------------------------------


@pytest.fixture
def box():
    from agentic_rl.tools.sandbox.episode import EpisodeSandbox

    if shutil.which("bwrap") is None or not bwrap_available():
        pytest.skip(BWRAP_SKIP_REASON)
    sandbox = EpisodeSandbox(SandboxConfig(timeout_s=1.0, max_output_chars=100))
    yield sandbox
    sandbox.close()


ALLOW = PermissionPolicy.allow_all(
    {
        "python": "workspace_write",
        "read_file": "read_only",
        "write_file": "workspace_write",
        "list_dir": "read_only",
    }
)


def _run(executor, *calls):
    calls = tuple(ToolCall(name, args, id=f"call_0_{i}") for i, (name, args) in enumerate(calls))
    return executor.execute(calls, [], trajectory_id="t", turn=0)


def test_sandbox_tools_report_limits_and_escapes_without_wiring(box, tmp_path):
    executor = ToolExecutor(box.tools(), ALLOW, AuditLog(tmp_path / "audit.jsonl"))
    report = _run(
        executor,
        ("python", {"code": "x = 1"}),
        ("python", {"code": "print('y' * 500)"}),
        ("python", {"code": "while True: pass"}),
        ("python", {"code": "b = bytearray(4 << 30)"}),
        ("write_file", {"path": "../x", "content": "1"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("list_dir", {"path": "."}),
    )
    events = [(e.category, e.rule, e.call_id, e.denied) for e in report.risk_events]
    assert events == [
        ("sandbox_limit", "output_truncated", "call_0_1", False),
        ("sandbox_limit", "timeout", "call_0_2", False),
        ("sandbox_limit", "memory", "call_0_3", False),
        ("path_outside_workspace", "arguments.path", "call_0_4", False),
        ("path_outside_workspace", "arguments.path", "call_0_5", False),
    ]
    assert (
        not report.results[4].ok and "rejected" in report.results[4].content
    )  # refused by the tool itself
    assert not (box.workspace.parent / "x").exists()
    # the audit log has every call, allowed
    assert [r["decision"] for r in AuditLog(tmp_path / "audit.jsonl").read()] == ["allow"] * 7


def test_symlink_escape_is_an_attempt(box):
    box.run_python("import os\nos.symlink('/etc', 'e')")
    report = _run(ToolExecutor(box.tools(), ALLOW), ("read_file", {"path": "e/hostname"}))
    assert [e.category for e in report.risk_events] == ["path_outside_workspace"]
    assert "symbolic link" in report.risk_events[0].reason and not report.results[0].ok


def test_path_rule_denial_is_one_event_counted_twice(box):
    policy = PermissionPolicy.from_dict(
        {"tools": {"write_file": {"side_effect": "workspace_write", "paths": {"path": ["**"]}}}}
    )
    report = _run(
        ToolExecutor(box.tools(), policy), ("write_file", {"path": "../x", "content": "1"})
    )
    (event,) = report.risk_events  # the tool never ran, so its detector did not run either
    assert event.category == "path_outside_workspace" and event.denied is True


# -- through a real episode and the rubric ---------------------------------------------------


def _reply(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@needs_bwrap
@pytest.mark.parametrize(
    "call, component",
    [
        (_reply("python", code="while True:\n    pass"), "sandbox_limit_hits"),
        (_reply("write_file", path="../x", content="escape"), "outside_workspace_attempts"),
    ],
)
def test_risk_components_of_a_scored_trajectory(chat, tmp_path, call, component):
    env = PythonScratchEnv(
        audit_path=str(tmp_path / "audit.jsonl"), config=SandboxConfig(timeout_s=1.0)
    )
    replies = [call, "<answer>21</answer>"]
    try:
        (traj,) = run_episodes(
            ScriptedPolicy(chat, lambda i, ctx: replies[ctx.count("<|im_start|>assistant") - 1]),
            chat,
            [env],
            [3],
            ["g"],
            RolloutConfig(max_turns=3, max_new_tokens=64),
        )
    finally:
        env.close()
    assert traj.stop_reason == StopReason.TERMINATED and len(traj.turns) == 2
    scored = env.rubric().apply(traj)
    c = scored.reward_components
    assert c[component] == 1.0 and c["correct"] == 1.0
    other = {"sandbox_limit_hits", "outside_workspace_attempts", "denied_calls"} - {component}
    assert all(c[name] == 0.0 for name in other)
    weight = {"sandbox_limit_hits": 0.1, "outside_workspace_attempts": 0.5}[component]
    assert c["risk"] == pytest.approx(weight)  # one event times its weight
    assert scored.reward == pytest.approx(c["outcome"] - c["risk"])
    assert not (tmp_path / "x").exists()
