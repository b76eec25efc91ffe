"""Limits on a sandbox as a whole (issue 19, item 3; issue 39, item 23): a size- and inode-capped
workspace and a cgroup memory/pids bound (cgroup v2, or v1 where the host mounts memory as v1).
Each test skips, with the host's reason, only where the host lacks the mechanism (mounting needs
root; the cgroup needs delegated cgroup v2 memory and pids, or a writable v1 memory hierarchy)."""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, SandboxUnavailableError, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.limits import REQUIRE_VARIABLE, cgroup_problem
from agentic_rl.tools.sandbox.workspace import WorkspaceError, write_file
from tests.markers import BWRAP_SKIP_REASON

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)

_FILL = """
import os
total = files = 0
try:
    with open('big', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20))
            total += 1 << 20
except OSError as exc:
    full = exc.errno
os.remove('big')
try:
    while True:
        open('f%d' % files, 'w').close()
        files += 1
except OSError as exc:
    many = exc.errno
(total, full, files, many)
"""


def _box(**limits) -> EpisodeSandbox:
    box = EpisodeSandbox(SandboxConfig(timeout_s=20.0, **limits))
    if any(p.startswith("workspace") for p in box.limit_problems):
        box.close()
        pytest.skip(f"the host cannot mount the workspace tmpfs: {box.limit_problems}")
    return box


@needs_bwrap
def test_the_workspace_is_capped_in_bytes_and_in_files():
    with _box(workspace_bytes=8 << 20, workspace_inodes=200) as box:
        total, full, files, many = eval(box.run_python(_FILL).value)
        assert total <= 8 << 20 and full == 28  # ENOSPC
        assert files < 200 and many == 28
        with pytest.raises(WorkspaceError, match="No space left"):  # the host's file tool too
            write_file(box.workspace, "more.txt", "x", max_bytes=10, uid=box.uid)


def test_host_file_tools_hit_the_same_cap_without_a_sandbox_process():
    with _box(backend="unsafe_local", workspace_bytes=1 << 20, workspace_inodes=50) as box:
        write_file(box.workspace, "a.txt", "x" * (512 << 10), max_bytes=1 << 20)
        with pytest.raises(WorkspaceError, match="No space left"):
            write_file(box.workspace, "b.txt", "x" * (768 << 10), max_bytes=1 << 20)


def test_require_whole_limits_refuses_a_host_without_them(tmp_path, monkeypatch):
    # a cgroup parent that is no cgroup: the sandbox's cgroup cannot be made there
    config = SandboxConfig(cgroup_parent=str(tmp_path))
    before = set(Path(tempfile.gettempdir()).glob("agentic-rl-ep-*"))
    with pytest.raises(
        SandboxUnavailableError, match="require_whole_limits: .*memory and processes"
    ):
        EpisodeSandbox(dataclasses.replace(config, require_whole_limits=True))
    monkeypatch.setenv(REQUIRE_VARIABLE, "1")  # what tools.require_whole_sandbox_limits sets
    with pytest.raises(SandboxUnavailableError, match="require_whole_limits"):
        EpisodeSandbox(config)
    assert set(Path(tempfile.gettempdir()).glob("agentic-rl-ep-*")) <= before  # nothing left
    with pytest.raises(ValueError, match="cgroup_parent must be an absolute path"):
        SandboxConfig(cgroup_parent="relative/dir")


def _v1_memory_hierarchy() -> str | None:
    """This process's cgroup v1 memory directory, where the host mounts one, else None."""
    with open("/proc/self/cgroup") as f:
        rel = next((ln.split(":", 2)[2].strip() for ln in f if ":memory:" in ln), None)
    with open("/proc/self/mountinfo") as f:
        mounts = [ln.split() for ln in f if " - cgroup " in ln and "memory" in ln.split()[-1]]
    return None if rel is None or not mounts else mounts[0][4] + rel


@pytest.mark.skipif(os.geteuid() != 0, reason="making cgroup v1 groups needs root")
def test_a_cgroup_v1_host_bounds_the_sandbox_as_a_whole():
    """Issue 39 item 23: on a host whose memory controller is cgroup v1 (hybrid hosts, this
    project's CI) the sandbox gets a v1 memory group (and a pids group), not per-process limits
    only."""
    memory = _v1_memory_hierarchy()
    if memory is None:
        pytest.skip("no cgroup v1 memory hierarchy on this host (cgroup v2 is tested below)")
    assert cgroup_problem() is None
    with EpisodeSandbox(SandboxConfig(memory_bytes=256 << 20, max_processes=10)) as box:
        assert box.cgroup is not None and not box.limit_problems
        paths = [str(p) for p in box.cgroup.paths]
        if box.cgroup.kind == "v1":
            assert paths[0].startswith(memory)
            assert (box.cgroup.path / "memory.limit_in_bytes").read_text().strip() == str(256 << 20)
        box.run_python("1")
        assert len((box.cgroup.path / "cgroup.procs").read_text().split()) >= 2
    assert not any(os.path.exists(p) for p in paths)


needs_cgroup = pytest.mark.skipif(
    cgroup_problem() is not None, reason=f"no per-sandbox cgroup here: {cgroup_problem()}"
)


@needs_bwrap
@needs_cgroup
def test_memory_of_several_processes_is_bounded_as_a_whole():
    # three children of 300 MiB each under a 512 MiB sandbox (each is far below RLIMIT_AS); the
    # value is how many are alive after 5 s (cgroup v2 kills the whole sandbox: no value; v1
    # kills the largest processes)
    code = (
        "import os, time\npids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
        "        b = bytearray(300 << 20)\n        for i in range(0, len(b), 4096):\n            b[i] = 1\n"
        "        time.sleep(30)\n        os._exit(0)\n    pids.append(pid)\ntime.sleep(5)\n"
        "sum(os.waitpid(p, os.WNOHANG) == (0, 0) for p in pids)"
    )
    with EpisodeSandbox(SandboxConfig(timeout_s=20.0, memory_bytes=512 << 20)) as box:
        result = box.run_python(code)
        assert result.value != "3" and result.memory_exceeded, result
        assert box.run_python("1 + 1").value == "2"  # a fresh interpreter starts


@needs_bwrap
@needs_cgroup
def test_a_memfd_is_bounded_by_the_sandbox_memory():
    code = (
        "import os\nfd = os.memfd_create('m')\nchunk = b'x' * (1 << 20)\n"
        "for _ in range(768):\n    os.write(fd, chunk)\n'held'"
    )
    with EpisodeSandbox(
        SandboxConfig(timeout_s=20.0, memory_bytes=512 << 20, max_file_bytes=1 << 30)
    ) as box:
        result = box.run_python(code)
        assert result.value != "'held'" and result.memory_exceeded, result


@needs_bwrap
@needs_cgroup
def test_processes_are_bounded_as_a_whole():
    code = (
        "import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
        "    n += 1\nn"
    )
    with EpisodeSandbox(SandboxConfig(timeout_s=20.0, max_processes=10)) as box:
        assert int(box.run_python(code).value) <= 10


def test_cgroup_files_written_for_a_sandbox(tmp_path):
    """The cgroup v2 interface files a sandbox's cgroup sets, checked on a plain directory that
    stands in for a delegated cgroup (this runs on hosts without cgroup v2 too)."""
    from agentic_rl.tools.sandbox.limits import SandboxCgroup

    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    assert cgroup_problem(str(tmp_path)) is None
    (tmp_path / "box").mkdir()
    with pytest.raises(FileExistsError):
        SandboxCgroup("box", 1 << 30, 67, str(tmp_path))
    group = SandboxCgroup("ep", 512 << 20, 13, str(tmp_path))
    assert group.path == tmp_path / "ep"
    assert {f.name: f.read_text() for f in group.path.iterdir()} == {
        "memory.max": str(512 << 20),
        "memory.oom.group": "1",
        "pids.max": "13",
    }
    (group.path / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    assert group.events()["oom_kill"] == 1
    group.add([12345])
    assert (group.path / "cgroup.procs").read_text() == "12345"
    offered = tmp_path / "v1"
    offered.mkdir()
    (offered / "cgroup.controllers").write_text("hugetlb\n")
    assert "not memory and pids" in cgroup_problem(str(offered))


def _v2_root_controllers() -> tuple[str | None, list[str]]:
    """(the cgroup v2 mount point, the controllers its root enables for children)."""
    with open("/proc/self/mountinfo") as f:
        roots = [ln.split()[4] for ln in f if " - cgroup2 " in ln]
    if not roots:
        return None, []
    return roots[0], (Path(roots[0]) / "cgroup.subtree_control").read_text().split()


@pytest.mark.skipif(os.geteuid() != 0, reason="making cgroups at the v2 root needs root")
def test_the_v2_no_internal_processes_rule_is_met_with_a_leaf():
    """Issue 39 item 23: a cgroup that holds processes cannot enable controllers for children
    (EBUSY); its processes move into a leaf first, then sandbox cgroups are its siblings."""
    from agentic_rl.tools.sandbox import cgroups

    mount, enabled = _v2_root_controllers()
    if not enabled:
        pytest.skip(f"the cgroup v2 root ({mount}) enables no controller for its children here")
    controller = frozenset({"memory" if "memory" in enabled else enabled[0]})
    parent = Path(mount) / f"agentic-rl-leaftest-{os.getpid()}"
    parent.mkdir()
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        for proc in sleepers:
            (parent / "cgroup.procs").write_text(str(proc.pid))
        with pytest.raises(OSError) as refused:  # the kernel's rule, as a systemd scope meets it
            (parent / "cgroup.subtree_control").write_text(f"+{next(iter(controller))}")
        assert refused.value.errno == errno.EBUSY
        cgroups._enable_v2(parent, controller)
        assert controller <= set((parent / "cgroup.subtree_control").read_text().split())
        assert (parent / "cgroup.procs").read_text().split() == []
        moved = (parent / cgroups.LEAF / "cgroup.procs").read_text().split()
        assert sorted(moved) == sorted(str(p.pid) for p in sleepers)
        (parent / "sandbox").mkdir()  # a sibling of the leaf, with the controller
        assert controller <= set((parent / "sandbox" / "cgroup.controllers").read_text().split())
        (parent / "sandbox").rmdir()
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
        for path in (parent / cgroups.LEAF, parent):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
