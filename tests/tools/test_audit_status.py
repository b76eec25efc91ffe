"""Audit records say how a sandboxed python call really ended (issue 19, item 12).

Real programs in the real sandbox, through :class:`ToolExecutor` and a real audit log: a timeout,
``os._exit(3)``, a segfault (by signal and by a NULL read through ctypes) and a CPU busy loop
past ``RLIMIT_CPU`` each get their own status, exit code or signal; the CPU-limit kill is also a
``sandbox_limit`` risk event.
"""

from __future__ import annotations

import shutil

import pytest

from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.types import ToolCall
from tests.markers import BWRAP_SKIP_REASON

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)

ALLOW = PermissionPolicy.from_dict({"tools": {"python": {"mode": "allow"}}})


def _audited(tmp_path, code: str, **limits):
    """Run ``code`` as one python tool call; return (audit record, risk events)."""
    log = AuditLog(tmp_path / "audit.jsonl")
    with EpisodeSandbox(SandboxConfig(**limits)) as box:
        report = ToolExecutor(box.tools(), ALLOW, log).execute(
            [ToolCall("python", {"code": code}, id="c0")], [], trajectory_id="t", turn=0
        )
    (record,) = log.read()
    return record, list(report.risk_events)


@pytest.mark.parametrize(
    "code, status, exit_code, signal",
    [
        ("print('fine')", "ok", None, None),
        ("raise ValueError('bad')", "error", None, None),
        ("import os\nos._exit(3)", "exited", 3, None),
        ("import sys\nsys.exit(0)", "exited", 0, None),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "killed", None, "SIGSEGV"),
        ("import ctypes\nctypes.string_at(0)", "killed", None, "SIGSEGV"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "killed", None, "SIGKILL"),
        ("import os\nos._exit(139)", "exited", 139, None),  # not mistaken for a segfault
    ],
)
def test_status_exit_code_and_signal_are_recorded(tmp_path, code, status, exit_code, signal):
    record, events = _audited(tmp_path, code, timeout_s=20.0)
    assert (record["status"], record["exit_code"], record["signal"]) == (status, exit_code, signal)
    assert record["ok"] is (status == "ok" or exit_code == 0)
    assert events == []


def test_timeout_is_recorded_as_timeout_and_a_limit_hit(tmp_path):
    record, events = _audited(tmp_path, "import time\ntime.sleep(30)", timeout_s=1.0)
    assert (record["status"], record["ok"], record["exit_code"], record["signal"]) == (
        "timeout",
        False,
        None,
        None,
    )
    assert [(e.category, e.rule) for e in events] == [("sandbox_limit", "timeout")]


def test_cpu_limit_kill_is_recorded_and_counted_as_a_limit_hit(tmp_path):
    # 1 s of CPU; the generous wall-clock timeout only matters on a heavily loaded host
    record, events = _audited(tmp_path, "while True:\n    pass", timeout_s=120.0, cpu_seconds=1)
    assert (record["status"], record["ok"], record["signal"]) == ("killed", False, "SIGXCPU")
    assert [(e.category, e.rule) for e in events] == [("sandbox_limit", "cpu")]
