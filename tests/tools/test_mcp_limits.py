"""The MCP server sandbox against a real misbehaving server (tests/tools/mcp_hostile_server.py).

Issue 39, items 15, 19, 21: a sandboxed server has no capability and runs as an unprivileged uid
(on a root host), has the python tool's rlimits, a capped workspace, its own cgroup where the
host allows one, a capped stderr buffer, and does not outlive a SIGKILLed trainer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from agentic_rl.tools.mcp import McpServerSpec, McpToolError, mcp_unavailable_reason
from agentic_rl.tools.mcp.session import MARKER_VARIABLE, McpSession
from agentic_rl.tools.sandbox.bwrap import SandboxUnavailableError
from agentic_rl.tools.sandbox.limits import cgroup_problem
from tests.killed_owner import env_marked, mounted, run_and_kill, wait_until
from tests.markers import needs_bwrap

SERVER = str(Path(__file__).with_name("mcp_hostile_server.py"))
pytestmark = [
    pytest.mark.skipif(mcp_unavailable_reason() is not None, reason=str(mcp_unavailable_reason())),
    needs_bwrap,
]
needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="the host is not root: the server runs as the host user in a user namespace "
    "(no capability by construction) and no workspace tmpfs can be mounted",
)
needs_cgroup = pytest.mark.skipif(
    cgroup_problem() is not None, reason=f"no per-sandbox cgroup here: {cgroup_problem()}"
)


def _spec(sandbox: str = "bwrap", **limits) -> dict:
    return {
        "name": "hostile",
        "command": sys.executable,
        "args": [SERVER],
        "ro_paths": [SERVER],
        "sandbox": sandbox,
        "startup_timeout_s": 600,
        "call_timeout_s": 120,
        **({"limits": limits} if limits else {}),
    }


def _session(sandbox: str = "bwrap", **limits) -> McpSession:
    return McpSession(McpServerSpec.from_dict(_spec(sandbox, **limits))).start()


@needs_root
def test_the_server_has_no_capability_and_runs_as_an_unprivileged_uid():
    session = _session()
    try:
        status = json.loads(session.call("status", {}))
        assert status["caps"] == dict.fromkeys(
            ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), "0000000000000000"
        )
        assert (status["uid"], status["gid"]) == (session.uid, session.gid)
        assert min(session.uid, session.gid) >= 1000
        assert status["groups"] == [] and status["no_new_privs"] == "1"
        assert status["oom_score_adj"] == 1000  # the OOM killer takes the sandbox first
        assert status["cwd"] == "/workspace"
        home = session.workspace.stat()
        assert (home.st_uid, home.st_gid, home.st_mode & 0o777) == (session.uid, session.gid, 0o700)
    finally:
        session.close()


def test_the_python_tool_s_rlimits_and_a_capped_workspace_apply():
    session = _session(memory_bytes=512 << 20, max_processes=20, workspace_bytes=32 << 20)
    try:
        limits = json.loads(session.call("status", {}))["limits"]
        assert limits["as"] == 512 << 20 and limits["fsize"] == 16 << 20
        assert limits["nofile"] == 256 and limits["cpu"] == 60
        with pytest.raises(McpToolError):  # MemoryError at RLIMIT_AS
            session.call("hold_memory", {"mib": 1500})
        assert int(session.call("spawn", {"n": 300})) < 20
        if session.limits.mounted:  # a root host
            filled = json.loads(session.call("fill", {"mib": 600}))
            assert filled["errno"] == 28 and filled["written"] <= 32 << 20  # ENOSPC
    finally:
        session.close()
    assert not session.workspace.exists()


@needs_cgroup
def test_the_server_s_memory_is_bounded_as_a_whole():
    # three children of 300 MiB, each far below RLIMIT_AS, under 768 MiB for the whole server
    session = _session(memory_bytes=768 << 20)
    try:
        assert session.limits.cgroup is not None
        try:
            alive = int(session.call("hold_in_children", {"children": 3, "mib": 300}))
        except Exception:  # noqa: BLE001 - cgroup v2 kills the whole server: fine too
            alive = 0
        assert alive < 3 and session.limits.oom_kills() >= 1
    finally:
        session.close()


def test_stderr_is_kept_up_to_its_cap_and_the_rest_is_dropped():
    session = _session(max_stderr_bytes=4096)
    try:
        assert session.call("spam_stderr", {"mib": 64}) == "done"
        assert session.stderr.total >= 64 << 20
        assert len(session.stderr.text()) == 4096 and session.stderr.text().endswith("e\n")
        assert sum(f.stat().st_size for f in session._dir.rglob("*") if f.is_file()) < 1 << 20
    finally:
        session.close()


def test_an_unsandboxed_server_gets_the_rlimits_too():
    session = _session("none", memory_bytes=600 << 20)
    try:
        status = json.loads(session.call("status", {}))
        assert status["limits"]["as"] == 600 << 20 and status["oom_score_adj"] == 1000
    finally:
        session.close()


def test_required_whole_limits_refuse_a_host_without_them(tmp_path):
    spec = McpServerSpec.from_dict(
        _spec(cgroup_parent=str(tmp_path), require_whole_limits=True)  # not a cgroup
    )
    with pytest.raises(SandboxUnavailableError, match="require_whole_limits: .*cgroup"):
        McpSession(spec).start()
    with pytest.raises(ValueError, match="limits.memory_bytes must be an integer"):
        McpServerSpec.from_dict(_spec(memory_bytes="1G"))


OWNER = f"""
import json, sys, threading, time
from agentic_rl.tools.mcp.session import McpSession
from agentic_rl.tools.mcp.spec import McpServerSpec
session = McpSession(McpServerSpec.from_dict(json.loads({json.dumps(json.dumps(_spec()))}))).start()
threading.Thread(target=session.call, args=("sleep", {{"seconds": 600}}), daemon=True).start()
time.sleep(1)  # the server is busy in the call
limits = getattr(session, "limits", None)
cgroup = [str(p) for p in limits.cgroup.paths] if limits and limits.cgroup else []
state = {{"marker": session.marker, "workspace": str(session.workspace), "cgroup": cgroup}}
"""


def test_a_killed_trainer_leaves_no_busy_server_mount_or_cgroup():
    state = run_and_kill(OWNER, timeout_s=600)
    entry = f"{MARKER_VARIABLE}={state['marker']}"
    assert wait_until(lambda: not env_marked(entry), 10.0), env_marked(entry)
    assert wait_until(lambda: not os.path.exists(state["workspace"]), 10.0)
    assert not mounted(state["workspace"])
    assert all(not os.path.exists(path) for path in state["cgroup"])
