"""Snapshot and restore against a sandboxed process that swaps symlinks in while they run (issue 19, item 1).

The host copies the workspace as root. A background process of the episode that swaps a workspace
directory for a symbolic link to a host path must never make the host read that path, write under
it or change its mode: the episode's processes are stopped while the host copies, and every path
component is opened relative to its parent's descriptor with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import os
import shutil
import stat
import time

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox, find_processes
from agentic_rl.tools.sandbox.snapshot import RecordedCall, SandboxSnapshot, WorkspaceImage
from tests.markers import BWRAP_SKIP_REASON

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)

# a background process that swaps the directory 'd' with a symlink to TARGET (each held ~0.3 ms)
_SWAPPER = """
import os, time
os.makedirs('dreal', exist_ok=True)
open('dreal/f', 'w').write('ok')
os.symlink({target!r}, 'dlink')
if os.fork() == 0:
    while True:
        for a, b in (('dreal', 'd'), ('d', 'dreal'), ('dlink', 'd'), ('d', 'dlink')):
            try:
                os.rename(a, b)
            except OSError:
                pass
            if b == 'd':
                time.sleep(0.0003)
'started'
"""

# a background process that swaps the directory 'd', as soon as it appears, with a symlink to
# TARGET in one atomic step (renameat2 RENAME_EXCHANGE)
_REPLACER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if os.fork() == 0:
    i = 0
    while True:
        if os.path.isdir('d') and not os.path.islink('d'):
            i += 1
            try:
                os.symlink({target!r}, 'link%d' % i)
            except OSError:
                continue
            libc.renameat2(-100, b'link%d' % i, -100, b'd', 2)
'started'
"""


def _root_only_dir(path, content: str | None = None):
    path.mkdir()
    if content is not None:
        (path / "key").write_text(content)
        os.chmod(path / "key", 0o600)
    os.chmod(path, 0o700)
    return path


def test_snapshot_never_reads_a_host_file_through_a_swapped_symlink(tmp_path):
    secret = _root_only_dir(tmp_path / "secret", "TOPSECRET")
    with EpisodeSandbox(SandboxConfig(timeout_s=20.0)) as box:
        assert box.run_python(_SWAPPER.format(target=str(secret))).value == "'started'"
        deadline, taken, errors = time.monotonic() + 3.0, 0, []
        while time.monotonic() < deadline and taken < 1000:
            taken += 1
            try:
                snap = box.snapshot()
            except OSError as exc:  # the copy raced with the swapper
                errors.append(exc)
                continue
            for path, _kind, payload, _ in snap.files.entries:
                assert not path.endswith("key"), f"snapshot {taken} copied the host file as {path}"
                assert not (isinstance(payload, bytes) and b"TOPSECRET" in payload), path
        assert errors == []  # the swapper is stopped while the host copies: no race at all
        assert box.run_python("'alive'").value == "'alive'"  # the interpreter runs on after it
    assert taken >= 3


def test_snapshot_leaves_the_episode_processes_running_afterwards(tmp_path):
    from agentic_rl.tools.sandbox.freeze import namespace_pids

    with EpisodeSandbox(SandboxConfig(timeout_s=20.0)) as box:
        box.run_python(
            "import subprocess\np = subprocess.Popen(['/bin/sh', '-c', 'while :; do :; done'])"
        )
        pids = namespace_pids(box.interpreter.pid)
        assert len(pids) >= 3  # the namespace's init, the worker, the shell
        box.snapshot()
        for pid in pids:  # thawed: none is left stopped
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().rpartition(")")[2].split()[0] not in "Tt", pid
        assert box.run_python("p.poll() is None").value == "True"


def test_restore_never_creates_or_chmods_outside_the_workspace(tmp_path):
    host_dir = _root_only_dir(tmp_path / "host_dir")
    # the snapshot's files: a directory 'd' (mode 0777) full of files; its interpreter life
    # starts from an empty workspace and its one call starts the replacer
    entries = [("d", "dir", None, 0o777)] + [
        (f"d/x{i:03d}", "file", b"1", 0o644) for i in range(300)
    ]
    files = WorkspaceImage(tuple(sorted(entries, key=lambda e: e[0])), 300)
    code = _REPLACER.format(target=str(host_dir))
    snap = SandboxSnapshot(
        files, WorkspaceImage((), 0), (RecordedCall("python", {"code": code}, ()),)
    )
    with EpisodeSandbox(SandboxConfig(timeout_s=20.0)) as box:
        errors = []
        for _ in range(2):
            try:
                box.restore(
                    snap, strict=False
                )  # the recorded outcome is a dummy: the replay "diverges"
            except OSError as exc:  # the copy raced with the replacer
                errors.append(exc)
            assert stat.S_IMODE(os.stat(host_dir).st_mode) == 0o700
            assert os.listdir(host_dir) == []
        assert errors == []
        assert sorted(os.listdir(box.workspace / "d")) == [
            f"x{i:03d}" for i in range(300)
        ] or os.path.islink(box.workspace / "d")  # restored (the replacer may have moved it since)
        marker = box.marker
    assert find_processes(marker) == []
