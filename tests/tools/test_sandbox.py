"""Functional tests of the sandboxed python tool, the workspace file tools and the factory."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from agentic_rl.tools import execute_tool_calls
from agentic_rl.tools.sandbox import bwrap as sandbox
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, SandboxUnavailableError, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.python_tool import ExecResult
from agentic_rl.types import ToolCall
from tests.markers import BWRAP_SKIP_REASON

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)


@pytest.fixture(scope="module")
def box():
    if shutil.which("bwrap") is None or not bwrap_available():
        pytest.skip(BWRAP_SKIP_REASON)
    with EpisodeSandbox(SandboxConfig(timeout_s=3.0)) as b:
        yield b


@needs_bwrap
def test_variables_persist_within_an_episode_and_not_into_the_next():
    with EpisodeSandbox() as first:
        first.run_python("secret_value = 41")
        assert first.run_python("secret_value + 1").value == "42"
        workspace = first.workspace
    assert not workspace.exists()  # close() deleted the workspace
    with EpisodeSandbox() as second:
        r = second.run_python("secret_value")
        assert r.exception == "NameError"


def test_final_expression_value_and_render(box):
    r = box.run_python("a = [1, 2]\nprint('hi')\na + [3]")
    assert (r.stdout, r.value, r.exit_status, r.ok) == ("hi\n", "[1, 2, 3]", None, True)
    assert r.render() == "hi\nOut: [1, 2, 3]"
    assert box.run_python("None").value is None
    assert box.run_python("z = 3").render() == "(no output)"


def test_exception_traceback_goes_to_stderr(box):
    r = box.run_python("def f():\n    raise ValueError('bad input')\nf()")
    assert r.exception == "ValueError" and not r.ok
    assert "Traceback" in r.stderr and "bad input" in r.stderr and "line 2, in f" in r.stderr
    assert "_sandbox_worker" not in r.stderr
    r = box.run_python("def (:")
    assert r.exception == "SyntaxError" and "SyntaxError" in r.stderr


def test_python_runs_in_workspace_shared_with_file_tools(box):
    tools = box.tools()
    assert set(tools) == {"python", "read_file", "write_file", "list_dir"}
    assert (
        tools["write_file"]({"path": "sub/in.txt", "content": "héllo"})
        == "wrote 6 bytes to sub/in.txt"
    )
    assert "Out: 'héllo'" in tools["python"]({"code": "open('sub/in.txt').read()"})
    tools["python"]({"code": "open('sub/in.txt', 'a').write('!')\nopen('out.txt','w').write('ok')"})
    assert tools["read_file"]({"path": "sub/in.txt"}) == "héllo!"
    listing = tools["list_dir"]({})
    assert "sub/" in listing and "out.txt  2 bytes" in listing
    assert tools["list_dir"]({"path": "sub"}) == "in.txt  7 bytes"


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.txt", "sub/../../x", "~/x"])
def test_file_tools_reject_path_escapes(box, path):
    calls = [
        ToolCall("read_file", {"path": path}, id="c1"),
        ToolCall("write_file", {"path": path, "content": "x"}, id="c2"),
        ToolCall("list_dir", {"path": path}, id="c3"),
    ]
    for result in execute_tool_calls(calls, [], box.tools()):
        assert not result.ok
        assert "WorkspaceError" in result.content and "rejected" in result.content


def test_file_tools_do_not_follow_symlinks(box, tmp_path):
    (tmp_path / "host.txt").write_text("HOST-ONLY")
    os.symlink(tmp_path / "host.txt", box.workspace / "link.txt")
    os.symlink(tmp_path, box.workspace / "linkdir")
    tools = box.tools()
    for call in ({"path": "link.txt"}, {"path": "linkdir/host.txt"}):
        with pytest.raises(ValueError, match="symbolic"):
            tools["read_file"](call)
    with pytest.raises(ValueError, match="symbolic"):
        tools["write_file"]({"path": "link.txt", "content": "overwrite"})
    assert (tmp_path / "host.txt").read_text() == "HOST-ONLY"
    assert "link.txt -> (symlink)" in tools["list_dir"]({})


def test_file_tool_size_limits(tmp_path):
    with EpisodeSandbox(
        SandboxConfig(max_file_bytes=10, max_read_chars=4, backend="unsafe_local")
    ) as b:
        tools = b.tools()
        with pytest.raises(ValueError, match="limit is 10"):
            tools["write_file"]({"path": "big.txt", "content": "x" * 11})
        tools["write_file"]({"path": "ok.txt", "content": "abcdefgh"})
        assert tools["read_file"]({"path": "ok.txt"}) == "abcd…[truncated 4 bytes]"
        with pytest.raises(ValueError, match="no such file"):
            tools["read_file"]({"path": "missing.txt"})


def test_unavailable_bwrap_raises_clear_error(monkeypatch):
    monkeypatch.setattr(sandbox, "_probe_bwrap", lambda: "bubblewrap (bwrap) is not installed")
    with EpisodeSandbox() as b:
        with pytest.raises(SandboxUnavailableError, match="not installed"):
            b.run_python("1")


def test_unsafe_local_backend_warns_and_keeps_state(caplog):
    with caplog.at_level(logging.WARNING, logger="agentic_rl.tools.sandbox.bwrap"):
        with EpisodeSandbox(SandboxConfig(backend="unsafe_local", timeout_s=2.0)) as b:
            b.run_python("counter = 1")
            assert b.run_python("counter + 1").value == "2"
            assert b.run_python("import os\nos.getcwd()").value == repr(str(b.workspace))
            assert b.run_python("bytearray(8 << 30)").memory_exceeded
    assert "unsafe_local" in caplog.text


def test_close_is_idempotent_and_blocks_further_calls():
    b = EpisodeSandbox(SandboxConfig(backend="unsafe_local"))
    b.close()
    b.close()
    with pytest.raises(RuntimeError, match="closed"):
        b.run_python("1")


def test_config_validation_and_result_flags():
    with pytest.raises(ValueError, match="backend"):
        SandboxConfig(backend="docker")
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0)
    assert not ExecResult(timed_out=True).ok and ExecResult(exit_status=0).ok


@pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_SKIP_REASON)
def test_private_tmp_is_mounted_before_the_python_prefixes(tmp_path):
    """A venv under the host's /tmp (e.g. a CI checkout) must stay visible inside the sandbox."""
    import sys

    from agentic_rl.tools.sandbox.bwrap import SandboxConfig, sandbox_command

    cmd = sandbox_command(SandboxConfig(), tmp_path, [sys.executable])
    tmpfs = cmd.index("--tmpfs")
    prefix_binds = [
        i for i, a in enumerate(cmd[:-1]) if a == "--ro-bind" and cmd[i + 1] == sys.prefix
    ]
    assert all(i > tmpfs for i in prefix_binds)
