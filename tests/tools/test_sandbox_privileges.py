"""The python tool's sandbox: no capability left anywhere the code can reach, the OOM killer's
first choice, and nothing left mounted after a SIGKILLed trainer (issue 39, items 15, 22, 23).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from tests.killed_owner import mounted, pid_alive, run_and_kill, wait_until
from tests.markers import needs_bwrap

pytestmark = needs_bwrap
needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="the host is not root: the sandbox runs as the host user in a user namespace (no "
    "capability by construction) and no workspace tmpfs can be mounted",
)
CAP_KILL = 1 << 5

_STATUS = """
import os
def status(pid):
    with open(f"/proc/{pid}/status") as f:
        rows = dict(line.rstrip("\\n").split(":\\t", 1) for line in f if ":\\t" in line)
    with open(f"/proc/{pid}/oom_score_adj") as f:
        oom = int(f.read())
    caps = {k: int(rows[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    return {"uid": int(rows["Uid"].split()[0]), "oom": oom, **caps}
(status("self"), status(os.getppid()))
"""


@needs_root
def test_the_code_has_no_capability_and_the_supervisor_only_kill():
    with EpisodeSandbox(SandboxConfig(timeout_s=20.0)) as box:
        result = box.run_python(_STATUS)
        kernel, supervisor = ast.literal_eval(result.value)
    zero = dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0)
    assert {k: kernel[k] for k in zero} == zero and kernel["uid"] == box.uid != 0
    assert supervisor["CapBnd"] == 0 and supervisor["CapInh"] == supervisor["CapAmb"] == 0
    assert supervisor["CapEff"] == supervisor["CapPrm"] == CAP_KILL  # kills its kernel
    assert kernel["oom"] == supervisor["oom"] == 1000  # the OOM killer takes the sandbox first


OWNER = """
from agentic_rl.processes import guard
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
box = EpisodeSandbox(SandboxConfig(timeout_s=20.0))
box.run_python("open('data', 'w').write('x' * 1000000)")  # RAM the tmpfs holds
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
cgroup = getattr(box.cgroup, "paths", [])
state = {"workspace": str(box.workspace), "mounted": str(box.workspace) in mounts,
         "pid": box.interpreter.pid, "watchdog": guard().watchdog_pid(),
         "cgroup": [str(p) for p in cgroup]}
"""


@needs_root
def test_a_killed_trainer_leaves_no_workspace_mount_process_or_cgroup():
    state = run_and_kill(OWNER)
    assert state["mounted"]
    assert wait_until(lambda: not mounted(state["workspace"]), 10.0)
    assert wait_until(lambda: not os.path.exists(os.path.dirname(state["workspace"])), 10.0)
    assert wait_until(lambda: not pid_alive(state["pid"]), 5.0)
    assert all(not os.path.exists(path) for path in state["cgroup"])


@needs_root
def test_mounts_of_a_trainer_killed_with_its_watchdog_are_swept_at_the_next_start():
    # both killed at once (say, a whole process tree): the next process that mounts sweeps
    killer = OWNER + "import os, signal\nos.kill(guard().watchdog_pid(), signal.SIGKILL)\n"
    state = run_and_kill(killer)
    try:
        assert not wait_until(lambda: not mounted(state["workspace"]), 1.0)  # still there
        code = (
            "from agentic_rl.tools.sandbox.limits import sweep_stale_workspaces\n"
            "print(sweep_stale_workspaces())"
        )
        swept = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        assert state["workspace"] in swept
        assert not mounted(state["workspace"])
        assert not os.path.exists(os.path.dirname(state["workspace"]))
        assert wait_until(lambda: not pid_alive(state["pid"]), 5.0)  # its sandbox, killed
        assert all(not os.path.exists(path) for path in state["cgroup"])
    finally:
        if mounted(state["workspace"]):
            subprocess.run(["umount", "-l", state["workspace"]], check=False)
