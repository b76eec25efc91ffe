"""One episode's sandbox: a private workspace, a warm interpreter, and the tools bound to them.

Usage::

    with EpisodeSandbox(SandboxConfig()) as box:
        tools = box.tools()   # {"python", "read_file", "write_file", "list_dir"}: Tool objects
        tools["python"]({"code": "x = 2\\nx * 21"})   # "Out: 42"

A new episode is a new :class:`EpisodeSandbox`: a fresh empty workspace and a fresh
interpreter, so nothing leaks from one episode to the next. :meth:`EpisodeSandbox.close`
kills every process of the episode and deletes the workspace.

:meth:`EpisodeSandbox.snapshot` and :meth:`EpisodeSandbox.restore` save and bring back the
episode's files and interpreter state (mechanism and limits: :mod:`agentic_rl.tools.sandbox.snapshot`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentic_rl.tools.definition.tool import Tool, ToolOutput
from agentic_rl.tools.governance.risk_detector import limit_events, path_events
from agentic_rl.tools.sandbox import workspace as ws
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, SandboxError
from agentic_rl.tools.sandbox.freeze import descendants, frozen
from agentic_rl.tools.sandbox.limits import SandboxCgroup, WholeLimits
from agentic_rl.tools.sandbox.python_tool import ExecResult, PythonInterpreter
from agentic_rl.tools.sandbox.snapshot import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    RecordedCall,
    SandboxSnapshot,
    SnapshotError,
    SnapshotReplayError,
    WorkspaceImage,
)
from agentic_rl.types import RiskEvent

__all__ = ["EpisodeSandbox", "find_processes"]

log = logging.getLogger(__name__)

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


def _object_schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: an object of ``props``, ``required`` ones, no others."""
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


class EpisodeSandbox:
    """The sandbox of one episode: workspace directory, interpreter and tools.

    Args:
        config: backend and limits (default :class:`SandboxConfig`).
        max_snapshot_bytes: largest workspace (file bytes) a snapshot copies.

    Attributes:
        marker: unique string in the command line of every process of this episode.
        workspace: host path of the episode's workspace (``/workspace`` inside).
        uid: the unprivileged user id the sandboxed code runs as (bwrap backend, root host),
            else None.

    Raises:
        SandboxUnavailableError: here when whole-sandbox limits are required and the host
            lacks one (:func:`agentic_rl.tools.sandbox.limits.whole_limits_required`); from the
            first ``python`` call (not here) when the bwrap backend cannot run.
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
    ) -> None:
        self.config = config or SandboxConfig()
        self.max_snapshot_bytes = max_snapshot_bytes
        # replay record of the running interpreter's life (see agentic_rl.tools.sandbox.snapshot)
        self._life_start: WorkspaceImage | None = None
        self._life_problem: str | None = "no interpreter has run yet"
        self._calls: list[RecordedCall] = []
        self._last_result: ExecResult | None = None
        self.marker = f"agentic-rl-ep-{secrets.token_hex(6)}"
        self._dir = Path(tempfile.mkdtemp(prefix=f"{self.marker}-"))
        self.workspace = self._dir / "workspace"
        self.workspace.mkdir()
        # capped workspace tmpfs, cgroup, and their cleanup should this process be killed
        self._limits = WholeLimits(self._dir, self.workspace, self.marker, self.config)
        self.limit_problems: tuple[str, ...] = self._limits.problems
        self.cgroup: SandboxCgroup | None = self._limits.cgroup
        self.uid: int | None = None
        capture = None
        if self.config.backend == "bwrap" and os.geteuid() == 0:
            self.uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
            os.chown(self.workspace, self.uid, self.uid)
        if self.config.backend == "unsafe_local":
            capture = str(self._dir / "fd_output")
        self.interpreter = PythonInterpreter(
            self.config, self.workspace, uid=self.uid, marker=self.marker, capture=capture
        )
        self.closed = False

    def run_python(self, code: str) -> ExecResult:
        """Run ``code`` in this episode's interpreter (see :meth:`PythonInterpreter.execute`).

        Raises:
            RuntimeError: the sandbox is closed.
            SandboxUnavailableError, SandboxError: the interpreter cannot start.
        """
        if self.closed:
            raise RuntimeError("this episode's sandbox is closed")
        if self.interpreter.pid is None:  # this call starts a new interpreter life
            self._start_life()
            self._start_interpreter()
        ooms = self._limits.oom_kills()
        result = self.interpreter.execute(code)
        if self._limits.oom_kills() > ooms:
            result = dataclasses.replace(result, memory_exceeded=True)
        if self.interpreter.pid is None:  # the call ended the life (timeout, crash, exit)
            self._end_life("the interpreter stopped")
        else:
            self._calls.append(RecordedCall("python", {"code": code}, _outcome(result)))
        return result

    def _start_interpreter(self) -> None:
        """Start the interpreter and move all its processes into the sandbox's cgroup, before
        any code runs (their children inherit it).

        Raises:
            SandboxUnavailableError, SandboxError: it cannot start, or cannot be moved.
        """
        self.interpreter.start()
        if self.cgroup is None or self.interpreter.pid is None:
            return
        try:
            self.cgroup.add(descendants(self.interpreter.pid))
        except OSError as exc:
            self.interpreter.close()
            raise SandboxError(
                f"cannot move the sandbox into its cgroup {self.cgroup.path}: {exc}"
            ) from exc

    def pop_last_result(self) -> ExecResult | None:
        """The :class:`ExecResult` of the last ``python`` *tool* call, once (then None).

        Lets a risk detector read the call's limit flags (see
        :mod:`agentic_rl.tools.governance.risk_detector`). Never raises.
        """
        result, self._last_result = self._last_result, None
        return result

    def _start_life(self) -> None:
        self._calls = []
        try:
            self._life_start, self._life_problem = (
                WorkspaceImage.capture(self.workspace, self.max_snapshot_bytes),
                None,
            )
        except (SnapshotError, OSError) as exc:
            self._life_start, self._life_problem = None, str(exc)

    def _end_life(self, why: str) -> None:
        self._life_start, self._life_problem, self._calls = None, why, []

    def snapshot(self) -> SandboxSnapshot:
        """Save the workspace files and the replay record of the running interpreter.

        Raises:
            SnapshotError: the sandbox is closed, or the workspace (now or when the interpreter
                started) held more than ``max_snapshot_bytes``.
        """
        if self.closed:
            raise SnapshotError("this episode's sandbox is closed")
        with self._quiescent():
            files = WorkspaceImage.capture(self.workspace, self.max_snapshot_bytes)
        if self.interpreter.pid is None:
            return SandboxSnapshot(files, None, ())
        if self._life_start is None:
            raise SnapshotError(f"cannot snapshot the running interpreter: {self._life_problem}")
        return SandboxSnapshot(files, self._life_start, tuple(self._calls))

    @contextlib.contextmanager
    def _quiescent(self) -> Iterator[bool]:
        """No process of the sandbox runs inside the block (see :mod:`agentic_rl.tools.sandbox.freeze`).

        The bwrap sandbox is stopped; when it does not settle it is killed (the interpreter life
        ends) and the block gets False. The ``unsafe_local`` backend is not stopped: its code runs
        as the host user anyway.
        """
        if self.config.backend != "bwrap":
            yield True
            return
        with frozen(self.interpreter.pid) as settled:
            if not settled:
                log.warning(
                    "sandbox %s: its processes did not stop for a workspace copy; killed",
                    self.marker,
                )
                self.interpreter.close()
                self._wait_until_gone()
                self._end_life("the sandbox was killed: its processes did not stop for a snapshot")
            yield settled

    def restore(self, snapshot: SandboxSnapshot, *, strict: bool = True) -> None:
        """Bring back the files and interpreter state of ``snapshot`` (see :mod:`agentic_rl.tools.sandbox.snapshot`).

        Kills the running interpreter and everything it started, puts back the workspace the
        snapshot's interpreter started from, replays the recorded calls in a fresh interpreter,
        and installs the snapshot's files.

        Args:
            snapshot: from :meth:`snapshot` of this sandbox or one with the same configuration.
            strict: raise when the replay does not reproduce the recorded results (else log a
                warning and keep the replayed state).

        Raises:
            SnapshotError: the sandbox is closed or ``snapshot`` is not a SandboxSnapshot.
            SnapshotReplayError: (``strict``) a replayed call gave a different result, or the
                replayed files differ from the snapshot's.
            SandboxUnavailableError, SandboxError: the fresh interpreter cannot start.
        """
        if not isinstance(snapshot, SandboxSnapshot):
            raise SnapshotError(f"expected a SandboxSnapshot, got {type(snapshot).__name__}")
        if self.closed:
            raise SnapshotError("this episode's sandbox is closed")
        self.interpreter.close()
        self._wait_until_gone()
        self._end_life("no interpreter has run since the restore")
        self._last_result = None
        problems = []
        if snapshot.life_start is not None:
            snapshot.life_start.materialize(self.workspace, self.uid)
            self._life_start, self._life_problem = snapshot.life_start, None
            problems = self._replay(snapshot.calls)
            self._calls = list(snapshot.calls)
        with self._quiescent() as settled:  # processes the replay started are stopped meanwhile
            if not settled:
                problems.append("the replayed sandbox was killed: its processes did not stop")
            if (
                snapshot.life_start is not None
                and WorkspaceImage.capture(self.workspace, self.max_snapshot_bytes)
                != snapshot.files
            ):
                problems.append("the replayed workspace files differ from the snapshot's")
            snapshot.files.materialize(self.workspace, self.uid)
        if problems:
            message = "restore: the replay diverged: " + "; ".join(problems)
            if strict:
                raise SnapshotReplayError(message)
            log.warning("%s (kept the replayed interpreter state)", message)

    def _replay(self, calls: tuple[RecordedCall, ...]) -> list[str]:
        problems = []
        if calls:
            self._start_interpreter()  # in the sandbox's cgroup, as for a live call
        for i, call in enumerate(calls):
            if call.tool == "python":
                got: tuple = _outcome(self.interpreter.execute(call.arguments["code"]))
            else:
                try:
                    got = (
                        ws.write_file(
                            self.workspace,
                            call.arguments["path"],
                            call.arguments["content"],
                            max_bytes=self.config.max_file_bytes,
                            uid=self.uid,
                        ),
                    )
                except ws.WorkspaceError as exc:
                    got = (f"error: {exc}",)
            if got != call.outcome:
                problems.append(f"call {i} ({call.tool}) gave {got!r}, recorded {call.outcome!r}")
            if self.interpreter.pid is None:
                problems.append(f"the interpreter stopped during replayed call {i}")
                break
        return problems

    def tools(self) -> dict[str, Tool]:
        """``{"python", "read_file", "write_file", "list_dir"}`` as :class:`Tool` objects bound
        to this episode. File tools raise :class:`~agentic_rl.tools.sandbox.workspace.WorkspaceError`
        (an error observation through ``execute_tool_calls``). Each tool carries its
        ``risk_detector`` (:mod:`agentic_rl.tools.governance.risk_detector`): sandbox limit hits of
        ``python``, paths outside the workspace for the file tools. Never raises."""
        cfg, root = self.config, self.workspace

        def python(code: str) -> str | ToolOutput:
            self._last_result = None
            self._last_result = result = self.run_python(code)
            return _python_output(result)

        def read_file(path: str) -> str | ToolOutput:
            return ws.read_file_output(root, path, max_chars=cfg.max_read_chars)

        def write_file(path: str, content: str) -> str:
            reply = ws.write_file(root, path, content, max_bytes=cfg.max_file_bytes, uid=self.uid)
            if self.interpreter.pid is not None:  # part of the running interpreter's life
                self._calls.append(
                    RecordedCall("write_file", {"path": path, "content": content}, (reply,))
                )
            return reply

        def list_dir(path: str = ".") -> str:
            return ws.list_dir(root, path)

        path = {"type": "string", "description": "path relative to the workspace"}

        def python_risk(call: Any, result: Any) -> list[RiskEvent]:
            return limit_events(call, self.pop_last_result())

        def python_status(
            call: Any, result: Any
        ) -> dict[str, Any] | None:  # before python_risk pops it
            return self._last_result.audit_fields() if self._last_result is not None else None

        def path_risk(call: Any, result: Any) -> list[RiskEvent]:
            return path_events(root, call)

        return {
            "python": Tool(
                "python",
                (
                    "Run Python code in a persistent sandboxed interpreter (variables persist "
                    "between calls; no network; working directory is the workspace). Returns "
                    "stdout, stderr and the value of a final expression."
                ),
                _object_schema(
                    {"code": {"type": "string", "description": "Python source to run"}}, ["code"]
                ),
                python,
                python_risk,
                python_status,
            ),
            "read_file": Tool(
                "read_file",
                "Read a text file from the workspace.",
                _object_schema({"path": path}, ["path"]),
                read_file,
                path_risk,
            ),
            "write_file": Tool(
                "write_file",
                "Write a text file in the workspace (replaces it).",
                _object_schema({"path": path, "content": {"type": "string"}}, ["path", "content"]),
                write_file,
                path_risk,
            ),
            "list_dir": Tool(
                "list_dir",
                "List a directory of the workspace.",
                _object_schema({"path": path}, []),
                list_dir,
                path_risk,
            ),
        }

    def close(self) -> None:
        """Kill every process of the episode and delete the workspace. Idempotent; never raises.

        Waits up to 2 s for the kernel to finish killing the PID namespace.
        """
        if self.closed:
            return
        self.closed = True
        self.interpreter.close()
        self._wait_until_gone()
        self._limits.close()  # cgroup, workspace mount, the directory
        self.cgroup = None

    def _wait_until_gone(self) -> None:
        """Wait up to 2 s for the kernel to finish killing the episode's PID namespace."""
        deadline = time.monotonic() + 2.0
        while self.config.backend == "bwrap" and find_processes(self.marker):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)

    def __enter__(self) -> EpisodeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter shutdown
            pass


def _python_output(result: ExecResult) -> str | ToolOutput:
    """The ``python`` tool's output: the rendered result, with the size of the whole output
    (the sections shown, without the cut notice, plus what the sandbox's caps cut) when a cap cut
    some, so the policy and the audit log are told the real size."""
    text = result.render()
    if not result.dropped_chars:
        return text
    kept = dataclasses.replace(result, output_truncated=False).render()
    size = len(kept.encode("utf-8", "replace")) + result.dropped_bytes
    return ToolOutput(text, len(kept) + result.dropped_chars, size)


def _outcome(result: ExecResult) -> tuple:
    """The deterministic fields of a python result (what a replay must reproduce)."""
    return (
        result.stdout,
        result.stderr,
        result.value,
        result.exception,
        result.exit_status,
        result.timed_out,
        result.memory_exceeded,
        result.output_truncated,
        result.dropped_chars,
    )
