"""Snapshots of a sandboxed episode: workspace images, replay of the interpreter, leaks between episodes."""

from __future__ import annotations

import os
import shutil

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.env_tools import SandboxedTools
from agentic_rl.tools.sandbox.episode import EpisodeSandbox, find_processes
from agentic_rl.tools.sandbox.snapshot import (
    SandboxSnapshot,
    SnapshotError,
    SnapshotReplayError,
    WorkspaceImage,
)
from agentic_rl.types import Action, ToolCall
from tests.markers import BWRAP_SKIP_REASON

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)


# -- WorkspaceImage (no sandbox needed) --------------------------------------------------------


def _tree(root):
    os.makedirs(root / "sub" / "deep")
    (root / "a.txt").write_text("alpha")
    (root / "sub" / "b.bin").write_bytes(b"\x00\x01beta")
    os.chmod(root / "sub" / "b.bin", 0o600)
    (root / "sub" / "deep" / "c").write_text("")
    os.symlink("/etc/passwd", root / "link_out")
    os.symlink("a.txt", root / "link_in")


def test_image_round_trips_files_dirs_modes_and_links(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    _tree(src)
    image = WorkspaceImage.capture(src)
    assert image.size == len("alpha") + 6
    kinds = {path: kind for path, kind, _, _ in image.entries}
    assert kinds == {
        "a.txt": "file",
        "sub": "dir",
        "sub/b.bin": "file",
        "sub/deep": "dir",
        "sub/deep/c": "file",
        "link_out": "link",
        "link_in": "link",
    }
    assert (
        dict((p, d) for p, _, d, _ in image.entries)["link_out"] == "/etc/passwd"
    )  # never followed
    (dst / "stale").write_text("from another episode")
    os.makedirs(dst / "stale_dir" / "x")
    image.materialize(dst)
    assert not (dst / "stale").exists() and not (dst / "stale_dir").exists()
    assert (dst / "sub" / "b.bin").read_bytes() == b"\x00\x01beta"
    assert os.stat(dst / "sub" / "b.bin").st_mode & 0o777 == 0o600
    assert (
        os.readlink(dst / "link_out") == "/etc/passwd" and os.readlink(dst / "link_in") == "a.txt"
    )
    assert WorkspaceImage.capture(dst) == image  # exactly the same tree


def test_image_skips_fifos_and_enforces_the_size_limit(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # reading it would block forever
    (tmp_path / "big").write_bytes(b"x" * 1000)
    image = WorkspaceImage.capture(tmp_path)
    assert [e[0] for e in image.entries] == ["big"]
    with pytest.raises(SnapshotError, match="more than 999 bytes"):
        WorkspaceImage.capture(tmp_path, max_bytes=999)


def test_image_restores_read_only_directories(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "ro").mkdir(parents=True)
    (src / "ro" / "f").write_text("x")
    os.chmod(src / "ro", 0o555)
    dst.mkdir()
    image = WorkspaceImage.capture(src)
    image.materialize(dst)
    assert (dst / "ro" / "f").read_text() == "x" and os.stat(dst / "ro").st_mode & 0o777 == 0o555
    os.chmod(src / "ro", 0o755)
    os.chmod(dst / "ro", 0o755)


# -- EpisodeSandbox snapshots ---------------------------------------------------------------


@pytest.fixture
def box():
    if shutil.which("bwrap") is None or not bwrap_available():
        pytest.skip(BWRAP_SKIP_REASON)
    sandbox = EpisodeSandbox(SandboxConfig(timeout_s=3.0))
    yield sandbox
    sandbox.close()


def test_restore_brings_back_variables_and_files(box):
    tools = box.tools()
    box.run_python("x = 40\nopen('log.txt', 'a').write('one\\n')")
    tools["write_file"]({"path": "data/n.txt", "content": "2"})
    box.run_python("x += int(open('data/n.txt').read())\nopen('log.txt', 'a').write('two\\n')")
    snap = box.snapshot()
    assert len(snap.calls) == 3 and snap.life_start is not None
    box.run_python("x = -1\nopen('log.txt', 'a').write('three\\n')")
    tools["write_file"]({"path": "later.txt", "content": "z"})
    box.restore(snap)
    assert box.run_python("x").value == "42"
    assert (
        tools["read_file"]({"path": "log.txt"}) == "one\ntwo\n"
    )  # appends were not doubled by the replay
    assert "later.txt" not in tools["list_dir"]({})
    box.restore(snap)  # a snapshot can be restored again
    assert box.run_python("x").value == "42"


def test_snapshot_without_a_running_interpreter_is_files_only(box):
    box.tools()["write_file"]({"path": "f.txt", "content": "kept"})
    snap = box.snapshot()
    assert snap.life_start is None and snap.calls == ()
    box.run_python("y = 1\nopen('f.txt', 'w').write('changed')")
    box.restore(snap)
    assert box.run_python("y").exception == "NameError"  # fresh interpreter
    assert (box.workspace / "f.txt").read_text() == "kept"


def test_a_timeout_ends_the_recorded_life(box):
    box.run_python("a = 1")
    box.run_python("while True: pass")  # timed out: interpreter killed, variables gone
    snap = box.snapshot()
    assert snap.life_start is None and snap.calls == ()


def test_restore_into_another_sandbox_and_kills_background_processes(box):
    box.run_python(
        "import subprocess\nkeep = 'v'\np = subprocess.Popen(['/bin/sh', '-c', 'sleep 60'])"
    )
    snap = box.snapshot()
    with EpisodeSandbox(SandboxConfig(timeout_s=3.0)) as other:
        other.restore(snap)  # the replay starts the background process again, in the other sandbox
        assert other.run_python("keep").value == "'v'"
    # restoring kills what ran in the sandbox before (the old interpreter's PID namespace)
    box.restore(snap)
    assert box.run_python("p.poll() is None").value == "True"


def test_nondeterministic_code_is_detected(box):
    box.run_python("import os\ntoken = os.urandom(8).hex()\nprint(token)")
    snap = box.snapshot()
    with pytest.raises(SnapshotReplayError, match="call 0 \\(python\\)"):
        box.restore(snap)
    box.restore(snap, strict=False)  # accepted with a warning: the replayed state is kept
    assert len(box.run_python("token").value) == 18


def test_set_order_is_the_same_in_every_interpreter(box):
    box.run_python("s = {'alpha', 'beta', 'gamma', 'delta', 'epsilon'}\nprint(list(s))")
    box.restore(box.snapshot())  # strict: raises if the hash seed differed between interpreters


def test_restore_errors(box):
    with pytest.raises(SnapshotError, match="expected a SandboxSnapshot"):
        box.restore("not a snapshot")
    box.run_python("q = 1")
    box.max_snapshot_bytes = 10
    (box.workspace / "big").write_bytes(b"x" * 100)
    with pytest.raises(SnapshotError, match="too large"):
        box.snapshot()
    box.close()
    with pytest.raises(SnapshotError, match="closed"):
        box.snapshot()
    with pytest.raises(SnapshotError, match="closed"):
        box.restore(SandboxSnapshot(WorkspaceImage((), 0), None, ()))


# -- SandboxedTools: no leaks between episodes ------------------------------------------------


def _call(name, **arguments):
    return Action("", tool_calls=(ToolCall(name, arguments, id=f"c_{name}"),))


@needs_bwrap
def test_reset_gives_each_episode_a_fresh_workspace_and_interpreter():
    tools = SandboxedTools(SandboxConfig(timeout_s=3.0))
    try:
        tools.reset("ep-1")
        first = tools.sandbox
        tools.execute(
            _call(
                "python",
                code="leak = 'secret'\nopen('f.txt', 'w').write('x')\n"
                "import subprocess\nsubprocess.Popen(['sleep', '60'])",
            ),
            0,
        )
        assert tools.execute(_call("python", code="leak"), 1).results[0].content == "Out: 'secret'"
        tools.reset("ep-2")
        assert first.closed and not first.workspace.exists() and find_processes(first.marker) == []
        assert (
            tools.execute(_call("python", code="leak"), 0).results[0].content.startswith("[stderr]")
        )
        assert tools.execute(_call("list_dir"), 0).results[0].content == "(empty directory)"
    finally:
        tools.close()


@needs_bwrap
def test_sandboxed_tools_snapshot_restore_and_errors():
    tools = SandboxedTools(SandboxConfig(timeout_s=3.0), names=("python",))
    assert [s["name"] for s in tools.schemas()] == ["python"]
    with pytest.raises(SnapshotError, match="reset"):
        tools.snapshot()
    with pytest.raises(RuntimeError, match="before reset"):
        tools.execute(_call("python", code="1"), 0)
    try:
        tools.reset()
        tools.execute(_call("python", code="v = 5"), 0)
        snap = tools.snapshot()
        fresh = SandboxedTools(SandboxConfig(timeout_s=3.0), names=("python",))
        try:
            fresh.restore(snap)  # into a new instance that never ran an episode
            assert fresh.execute(_call("python", code="v * 2"), 0).results[0].content == "Out: 10"
        finally:
            fresh.close()
    finally:
        tools.close()
    with pytest.raises(ValueError, match="unknown sandbox tools"):
        SandboxedTools(names=("shell",))
