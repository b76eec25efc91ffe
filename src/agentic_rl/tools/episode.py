"""One episode's sandbox: a private workspace, a warm interpreter, and the tools bound to them.

Usage::

    with EpisodeSandbox(SandboxConfig()) as box:
        tools = box.tools()   # {"python", "read_file", "write_file", "list_dir"}: Tool objects
        tools["python"]({"code": "x = 2\\nx * 21"})   # "Out: 42"

A new episode is a new :class:`EpisodeSandbox`: a fresh empty workspace and a fresh
interpreter, so nothing leaks from one episode to the next. :meth:`EpisodeSandbox.close`
kills every process of the episode and deletes the workspace.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from agentic_rl.tools import workspace as ws
from agentic_rl.tools.base import Tool
from agentic_rl.tools.python_tool import ExecResult, PythonInterpreter
from agentic_rl.tools.sandbox import SandboxConfig

__all__ = ["EpisodeSandbox", "find_processes"]

_UID_BASE, _UID_SPAN = 200_000, 100_000


def find_processes(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (scans ``/proc``). Never raises."""
    needle, found = marker.encode(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


class EpisodeSandbox:
    """The sandbox of one episode: workspace directory, interpreter and tools.

    Args:
        config: backend and limits (default :class:`SandboxConfig`).

    Attributes:
        marker: unique string in the command line of every process of this episode.
        workspace: host path of the episode's workspace (``/workspace`` inside).
        uid: the unprivileged user id the sandboxed code runs as (bwrap backend, root host),
            else None.

    Raises:
        SandboxUnavailableError: from the first ``python`` call (not here) when the bwrap
            backend cannot run.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.marker = f"agentic-rl-ep-{secrets.token_hex(6)}"
        self._dir = Path(tempfile.mkdtemp(prefix=f"{self.marker}-"))
        self.workspace = self._dir / "workspace"
        self.workspace.mkdir()
        self.uid: int | None = None
        capture = None
        if self.config.backend == "bwrap" and os.geteuid() == 0:
            self.uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
            os.chown(self.workspace, self.uid, self.uid)
        if self.config.backend == "unsafe_local":
            capture = str(self._dir / "fd_output")
        self.interpreter = PythonInterpreter(self.config, self.workspace, uid=self.uid,
                                             marker=self.marker, capture=capture)
        self.closed = False

    def run_python(self, code: str) -> ExecResult:
        """Run ``code`` in this episode's interpreter (see :meth:`PythonInterpreter.execute`).

        Raises:
            RuntimeError: the sandbox is closed.
            SandboxUnavailableError, SandboxError: the interpreter cannot start.
        """
        if self.closed:
            raise RuntimeError("this episode's sandbox is closed")
        return self.interpreter.execute(code)

    def tools(self) -> dict[str, Tool]:
        """``{"python", "read_file", "write_file", "list_dir"}`` as :class:`Tool` objects bound
        to this episode. File tools raise :class:`~agentic_rl.tools.workspace.WorkspaceError`
        (an error observation through ``execute_tool_calls``). Never raises."""
        cfg, root = self.config, self.workspace

        def python(code: str) -> str:
            return self.run_python(code).render()

        def read_file(path: str) -> str:
            return ws.read_file(root, path, max_chars=cfg.max_read_chars)

        def write_file(path: str, content: str) -> str:
            return ws.write_file(root, path, content, max_bytes=cfg.max_file_bytes, uid=self.uid)

        def list_dir(path: str = ".") -> str:
            return ws.list_dir(root, path)

        def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
            return {"type": "object", "properties": props, "required": required,
                    "additionalProperties": False}

        path = {"type": "string", "description": "path relative to the workspace"}
        return {
            "python": Tool("python", (
                "Run Python code in a persistent sandboxed interpreter (variables persist "
                "between calls; no network; working directory is the workspace). Returns "
                "stdout, stderr and the value of a final expression."),
                obj({"code": {"type": "string", "description": "Python source to run"}},
                    ["code"]), python),
            "read_file": Tool("read_file", "Read a text file from the workspace.",
                              obj({"path": path}, ["path"]), read_file),
            "write_file": Tool("write_file", "Write a text file in the workspace (replaces it).",
                               obj({"path": path, "content": {"type": "string"}},
                                   ["path", "content"]), write_file),
            "list_dir": Tool("list_dir", "List a directory of the workspace.",
                             obj({"path": path}, []), list_dir),
        }

    def close(self) -> None:
        """Kill every process of the episode and delete the workspace. Idempotent; never raises.

        Waits up to 2 s for the kernel to finish killing the PID namespace.
        """
        if self.closed:
            return
        self.closed = True
        self.interpreter.close()
        deadline = time.monotonic() + 2.0
        while self.config.backend == "bwrap" and find_processes(self.marker):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> EpisodeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter shutdown
            pass
