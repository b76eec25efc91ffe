"""The audit log: record fields, per-record durability (SIGKILL mid-way), filters, and ``agentic-rl audit``."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agentic_rl.cli import main
from agentic_rl.tools import tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import ToolCall, ToolCallError


@tool
def echo(text: str) -> str:
    """Echo the text.

    Args:
        text: what to echo.
    """
    return text


def _filled_log(path):
    policy = PermissionPolicy.from_dict(
        {"tools": {"echo": {"mode": "allow"}, "rm": {"mode": "deny"}}}
    )
    tools = {"echo": echo, "rm": echo}
    executor = ToolExecutor(tools, policy, AuditLog(path), {"run_id": "run-1"})
    executor.execute(
        [
            ToolCall("echo", {"text": "héllo"}, raw="r0", id="call_0_0"),
            ToolCall("rm", {"text": "/"}, id="call_0_1"),
        ],
        [],
        trajectory_id="traj-a",
        turn=0,
    )
    executor.execute(
        [ToolCall("nope", {}, id="call_1_0")],
        [ToolCallError("{bad", "invalid JSON")],
        trajectory_id="traj-b",
        turn=1,
    )
    return AuditLog(path)


def test_record_fields(tmp_path):
    records = _filled_log(tmp_path / "audit.jsonl").read()
    assert [r["decision"] for r in records] == ["allow", "deny", "error", "error"]
    # message order: the call "call_1_0" stood first, so the parser error was the block at k=1
    assert [r["status"] for r in records] == ["ok", "denied", "unknown_tool", "parse_error"]
    ok = records[0]
    expected = {
        "time",
        "run_id",
        "trajectory_id",
        "turn",
        "call_id",
        "tool",
        "arguments",
        "raw",
        "decision",
        "rule",
        "reason",
        "risk",
        "duration_s",
        "ok",
        "status",
        "exit_code",
        "signal",
        "output_bytes",
        "output_sha256",
        "truncated",
    }
    assert set(ok) == expected
    assert (ok["run_id"], ok["trajectory_id"], ok["turn"], ok["call_id"]) == (
        "run-1",
        "traj-a",
        0,
        "call_0_0",
    )
    assert (ok["tool"], ok["arguments"], ok["raw"], ok["ok"]) == (
        "echo",
        {"text": "héllo"},
        "r0",
        True,
    )
    assert ok["output_bytes"] == 6  # "héllo" in UTF-8
    assert ok["output_sha256"] == hashlib.sha256("héllo".encode()).hexdigest()
    assert ok["duration_s"] >= 0 and ok["risk"] is None and ok["truncated"] is False
    denied = records[1]
    assert (denied["rule"], denied["risk"], denied["ok"], denied["duration_s"]) == (
        "tools.rm.mode",
        "denied",
        False,
        0.0,
    )
    parse = records[3]
    assert (parse["tool"], parse["raw"], parse["turn"], parse["trajectory_id"]) == (
        "",
        "{bad",
        1,
        "traj-b",
    )
    assert parse["call_id"] == "call_1_1"


def test_read_filters(tmp_path):
    log = _filled_log(tmp_path / "audit.jsonl")
    assert [r["call_id"] for r in log.read(tool="rm")] == ["call_0_1"]
    assert [r["tool"] for r in log.read(decision="allow")] == ["echo"]
    assert len(log.read(trajectory_id="traj-b")) == 2
    assert log.read(tool="echo", decision="deny") == []
    assert AuditLog(tmp_path / "missing.jsonl").read() == []


def test_each_record_is_on_disk_when_append_returns(tmp_path):
    path = tmp_path / "sub" / "audit.jsonl"  # parent directories are created
    log = AuditLog(path)
    for i in range(3):
        log.append({"i": i})
        assert len(path.read_text().splitlines()) == i + 1  # read through another file handle


def test_huge_arguments_are_previewed(tmp_path):
    log = AuditLog(tmp_path / "a.jsonl")
    log.append({"arguments": {"blob": "x" * 100_000}})
    (record,) = log.read()
    assert isinstance(record["arguments"], str) and record["arguments"].startswith("<100012 chars>")


def test_torn_last_line_is_skipped_but_corruption_elsewhere_raises(tmp_path):
    path = tmp_path / "a.jsonl"
    log = AuditLog(path)
    log.append({"i": 0})
    with open(path, "a") as f:
        f.write('{"i": 1, "tor')
    assert [r["i"] for r in log.read()] == [0]
    path.write_text('{"i": 0}\nnot json\n{"i": 2}\n')
    with pytest.raises(ValueError, match=r"a\.jsonl:2"):
        log.read()


WRITER = textwrap.dedent(
    """
    import sys
    from agentic_rl.tools.governance.audit import AuditLog
    log = AuditLog(sys.argv[1])
    i = 0
    while True:
        log.append({"i": i, "payload": "x" * (i % 5000)})
        i += 1
    """
)


def test_sigkill_mid_way_loses_no_completed_record(tmp_path):
    path = tmp_path / "audit.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= 200:
                break
            time.sleep(0.02)
        else:
            pytest.fail("writer produced too few records")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1].decode().splitlines()
    assert len(complete) >= 200
    assert [json.loads(line)["i"] for line in complete] == list(
        range(len(complete))
    )  # all parse, none lost
    assert [r["i"] for r in AuditLog(path).read()] == list(range(len(complete)))


# -- agentic-rl audit RUN_DIR ---------------------------------------------------------------


def test_cli_json_with_filters(tmp_path, capsys):
    _filled_log(tmp_path / "audit.jsonl")
    assert main(["audit", str(tmp_path), "--json", "--decision", "deny"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x)["tool"] for x in lines] == ["rm"]
    assert main(["audit", str(tmp_path), "--json", "--trajectory", "traj-a", "--tool", "echo"]) == 0
    assert [json.loads(x)["call_id"] for x in capsys.readouterr().out.splitlines()] == ["call_0_0"]


def test_cli_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    _filled_log(tmp_path / "audit.jsonl")
    assert main(["audit", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 records" in out and "tools.rm.mode" in out and "echo" in out


def test_cli_missing_log_is_one_line_error(tmp_path, capsys):
    assert main(["audit", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "audit.jsonl" in err and len(err.strip().splitlines()) == 1
