"""MCP tools against a real local MCP server (tests/tools/mcp_server.py, fastmcp): no mocks.

The server records every call it receives in a calls log before running the tool, so "a denied
call never ran" is checked on the server's side. Startup timeouts are generous: under load a
niced server may take a minute to import fastmcp.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentic_rl.envs.calculator.env import CalculatorEnv
from agentic_rl.envs.context import EnvContext
from agentic_rl.tools.mcp import McpServerSpec, mcp_unavailable_reason
from agentic_rl.tools.mcp.session import MARKER_VARIABLE
from agentic_rl.tools.mcp.spec import side_effect_from_annotations
from agentic_rl.types import Action, ToolCall
from tests.markers import needs_bwrap

SERVER = Path(__file__).with_name("mcp_server.py")
pytestmark = pytest.mark.skipif(
    mcp_unavailable_reason() is not None, reason=str(mcp_unavailable_reason())
)
STARTUP_S = 600.0


def _calls(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _audit(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _act(env: CalculatorEnv, *calls: tuple[str, dict]):
    action = Action(text="", tool_calls=tuple(ToolCall(n, a) for n, a in calls))
    obs, _reward, _terminated, _truncated, info = env.step(action)
    return obs, info


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    """The test server on streamable HTTP: (url, calls log, notes dir); stopped afterwards."""
    root = tmp_path_factory.mktemp("mcp-http")
    calls, notes = root / "calls.jsonl", root / "notes"
    notes.mkdir()
    port = _free_port()
    argv = [sys.executable, str(SERVER), "--calls", str(calls), "--notes", str(notes)]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the MCP test server exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    yield f"http://127.0.0.1:{port}/mcp", calls, notes
    proc.kill()
    proc.wait()


def test_spec_from_dict_names_wrong_keys_and_values():
    spec = McpServerSpec.from_dict({"name": "n", "command": "python3", "args": ["s.py"]})
    assert spec.transport == "stdio" and spec.sandbox == "bwrap" and spec.args == ("s.py",)
    assert McpServerSpec.from_dict({"name": "h", "url": "http://x/mcp"}).transport == "http"
    with pytest.raises(ValueError, match="unknown key.*'comand'"):
        McpServerSpec.from_dict({"name": "n", "comand": "x"})
    with pytest.raises(ValueError, match="needs 'command'"):
        McpServerSpec.from_dict({"name": "n"})
    with pytest.raises(ValueError, match="side_effects.t must be one of"):
        McpServerSpec.from_dict({"name": "n", "command": "x", "side_effects": {"t": "write"}})
    with pytest.raises(ValueError, match="must be absolute"):
        McpServerSpec.from_dict({"name": "n", "command": "x", "ro_paths": ["rel"]})


def test_annotations_map_to_permission_classes_with_the_spec_defaults():
    # MCP defaults: readOnlyHint false, destructiveHint true, openWorldHint true
    assert side_effect_from_annotations(None) == "network"
    assert side_effect_from_annotations({"readOnlyHint": True}) == "read_only"
    assert side_effect_from_annotations({"openWorldHint": False}) == "irreversible"
    closed = {"openWorldHint": False, "destructiveHint": False}
    assert side_effect_from_annotations(closed) == "workspace_write"


def test_http_server_tools_run_through_the_executor(http_server, tmp_path):
    url, calls, notes = http_server
    audit = tmp_path / "audit.jsonl"
    spec = {"name": "notes", "url": url, "startup_timeout_s": STARTUP_S, "call_timeout_s": 300}
    env = CalculatorEnv(mcp_servers=[spec], context=EnvContext(audit_path=str(audit), run_id="r"))
    try:
        obs, _ = env.reset(seed=0, options={"trajectory_id": "t0"})
        names = [t["name"] for t in obs.tools]
        assert names == ["calculator", "add", "write_note", "sleep", "crash", "fail"]
        add = next(t for t in obs.tools if t["name"] == "add")
        assert add["parameters"]["required"] == ["a"]  # the server's JSON schema, as listed
        assert "add" in env.system_prompt
        before = len(_calls(calls))
        obs, info = _act(
            env,
            ("add", {"a": 2, "b": 3}),
            ("write_note", {"name": "n1", "text": "hello"}),
            ("crash", {}),  # no annotations: "network" by the MCP defaults, denied by default
            ("add", {"a": "x"}),  # wrong type: refused by the schema before the server
        )
        contents = [r.content for r in obs.tool_results]
        assert contents[0] == "5" and contents[1].startswith("wrote 5 chars")
        assert contents[2].startswith("Denied: the call to 'crash' was not run")
        assert "expected integer" in contents[3]
        assert [r.ok for r in obs.tool_results] == [True, True, False, False]
        assert (notes / "n1.txt").read_text() == "hello"  # the side effect happened
        received = _calls(calls)[before:]
        assert [c["tool"] for c in received] == ["add", "write_note"]  # crash never ran
        assert [e.category for e in obs.risk_events] == ["denied"]
        records = [r for r in _audit(audit) if r["trajectory_id"] == "t0"]
        assert [(r["tool"], r["decision"]) for r in records] == [
            ("add", "allow"),
            ("write_note", "allow"),
            ("crash", "deny"),
            ("add", "allow"),
        ]
        assert records[0]["arguments"] == {"a": 2, "b": 3} and records[0]["run_id"] == "r"
        assert info["tool_errors"] == 2
    finally:
        env.close()


def test_http_tool_error_and_timeout_are_observations(http_server, tmp_path):
    url, _calls_log, _notes = http_server
    common = {"url": url, "startup_timeout_s": STARTUP_S}
    servers = [  # one server under two names: its own timeout and tools for each
        {
            **common,
            "name": "notes",
            "prefix": "notes.",
            "tools": ["fail", "add"],
            "call_timeout_s": 300,
        },
        {**common, "name": "slow", "prefix": "slow.", "tools": ["sleep"], "call_timeout_s": 3},
    ]
    for server in servers:
        server["side_effects"] = {"sleep": "read_only", "fail": "read_only"}
    env = CalculatorEnv(
        mcp_servers=servers, context=EnvContext(audit_path=str(tmp_path / "audit.jsonl"))
    )
    try:
        obs, _ = env.reset(seed=1)
        names = [t["name"] for t in obs.tools]
        assert names == ["calculator", "notes.fail", "notes.add", "slow.sleep"]
        obs, _ = _act(env, ("notes.fail", {"message": "boom"}), ("slow.sleep", {"seconds": 30}))
        fail, sleep = obs.tool_results
        assert fail.content.startswith("Error: McpToolError:") and "boom" in fail.content
        assert sleep.content.startswith("Error: McpTimeoutError:") and "within 3 s" in sleep.content
        reasons = [(e.category, e.reason) for e in obs.risk_events]
        assert reasons == [("sandbox_limit", "mcp_timeout")]
        obs, _ = _act(env, ("notes.add", {"a": 1, "b": 1}))  # the HTTP server is still there
        assert obs.tool_results[0].content == "2"
    finally:
        env.close()


def _marked_processes(marker: str) -> list[int]:
    needle, found = f"{MARKER_VARIABLE}={marker}".encode(), []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit():
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry.name))
        except OSError:
            continue
    return found


@needs_bwrap
def test_stdio_server_per_episode_in_the_sandbox_survives_crash_and_hang(tmp_path):
    shared = tmp_path / "shared"
    (shared / "notes").mkdir(parents=True)
    for path in (shared, shared / "notes"):  # the server writes as the sandbox's own uid
        path.chmod(0o777)
    calls = shared / "calls.jsonl"
    spec = {
        "name": "local",
        "command": sys.executable,
        "args": [str(SERVER), "--calls", str(calls), "--notes", str(shared / "notes")],
        "ro_paths": [str(SERVER)],
        "rw_paths": [str(shared)],
        "side_effects": {"crash": "read_only", "sleep": "read_only"},
        "startup_timeout_s": STARTUP_S,
        "call_timeout_s": 60,
    }
    audit = tmp_path / "audit.jsonl"
    env = CalculatorEnv(mcp_servers=[spec], context=EnvContext(audit_path=str(audit)))
    try:
        env.reset(seed=0, options={"trajectory_id": "s0"})
        assert env.mcp is not None and env.mcp.live_sessions() == {}  # lazy: nothing started yet
        obs, _ = _act(env, ("write_note", {"name": "in-sandbox", "text": "x"}))
        assert obs.tool_results[0].ok, obs.tool_results[0].content
        assert (shared / "notes" / "in-sandbox.txt").read_text() == "x"
        session = env.mcp.live_sessions()["local"]
        first_pid = _calls(calls)[-1]["pid"]
        assert first_pid < 10  # its own PID namespace (bwrap's init is 1)
        assert _marked_processes(session.marker)
        obs, _ = _act(env, ("crash", {}), ("add", {"a": 4, "b": 5}))
        crash, add = obs.tool_results
        assert crash.content.startswith("Error: McpServerError:") and not crash.ok
        assert add.content == "9"  # a fresh server answered the next call
        assert [(e.category, e.reason) for e in obs.risk_events] == [
            ("sandbox_limit", "mcp_server_failed")
        ]
        assert not _marked_processes(session.marker)  # the dead server left nothing behind
        second = env.mcp.live_sessions()["local"]
        obs, _ = _act(env, ("sleep", {"seconds": 600}))
        assert obs.tool_results[0].content.startswith("Error: McpTimeoutError:")
        assert "the server was stopped" in obs.tool_results[0].content
        assert not _marked_processes(second.marker) and second.closed
        env.end_episode()
        assert env.mcp.live_sessions() == {}
        tools = [(r["tool"], r["decision"], r["ok"]) for r in _audit(audit)]
        assert tools == [
            ("write_note", "allow", True),
            ("crash", "allow", False),
            ("add", "allow", True),
            ("sleep", "allow", False),
        ]
    finally:
        env.close()


def test_a_server_that_cannot_start_is_one_error_naming_it():
    from agentic_rl.tools.mcp import McpServerError, McpTools

    spec = {"name": "broken", "command": sys.executable, "args": ["-c", "raise SystemExit(7)"]}
    with pytest.raises(McpServerError, match="MCP server 'broken' could not start"):
        McpTools([{**spec, "sandbox": "none", "startup_timeout_s": STARTUP_S}])
