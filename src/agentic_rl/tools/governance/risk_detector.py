"""Risk detection for sandboxed tools: sandbox limit hits and paths outside the workspace.

The tools of an :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox` carry these detectors
(``Tool.risk_detector``), so any env that offers them through
:class:`~agentic_rl.tools.governance.executor.ToolExecutor` gets the events with no wiring.
:class:`SandboxRiskDetector` is the same detection as an executor-wide ``risk_detector``, for
envs that wrap the sandbox in tools of their own (other names). Detection runs after every
*allowed* call (denied calls already produce their own event) and yields risk events for the
rubric's risk components (:mod:`agentic_rl.rewards.risk`):

``sandbox_limit`` (one event per limit hit by a ``python`` call; ``reason`` names the limit)
    ``timeout`` (wall-clock limit; the interpreter was killed), ``memory`` (``MemoryError``
    under ``RLIMIT_AS``), ``output_truncated`` (stdout/stderr/value cut at
    ``max_output_chars``), ``processes`` (an uncaught ``BlockingIOError``, EAGAIN, as raised by
    ``fork`` under ``RLIMIT_NPROC``), ``file_size`` (errno 27 EFBIG under ``RLIMIT_FSIZE``),
    ``open_files`` (errno 24 EMFILE under ``RLIMIT_NOFILE``), ``cpu`` (killed under ``RLIMIT_CPU``:
    by SIGXCPU at the soft limit or SIGKILL at the hard one, after that much CPU time;
    :attr:`~agentic_rl.tools.sandbox.python_tool.ExecResult.cpu_exceeded`, not a guess from the exit
    status, so ``os._exit(152)`` is no CPU hit). Limit hits that the code catches itself (a ``try`` around
    ``fork``) are invisible from outside and not counted.
``path_outside_workspace`` (one per offending file-tool call)
    a workspace file tool (``read_file``, ``write_file``, ``list_dir``) was called with a path
    that is absolute (``/…``, ``~…``), climbs out of the workspace with ``..`` after
    normalisation, or goes through a symbolic link (in the workspace) whose target lies outside
    it. The workspace tools refuse such paths anyway; the event records the *attempt*, whether
    or not the permission policy allowed the tool. Paths opened by ``python`` code are not
    seen (the sandbox's file-system isolation contains them).

A call the permission policy denies because of a path rule yields one event with
``denied=True`` and category ``path_outside_workspace`` (from the executor, not from here): it
counts in both ``denied_calls`` and ``outside_workspace_attempts``.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentic_rl.tools.governance.executor import risk_event
from agentic_rl.tools.sandbox.python_tool import ExecResult
from agentic_rl.types import RiskEvent, ToolCall, ToolResult

__all__ = [
    "SANDBOX_LIMIT",
    "PATH_OUTSIDE_WORKSPACE",
    "FILE_TOOL_PATH_ARGUMENTS",
    "SandboxRiskDetector",
    "limit_hits",
    "limit_events",
    "path_escape",
    "path_events",
]

SANDBOX_LIMIT = "sandbox_limit"
PATH_OUTSIDE_WORKSPACE = "path_outside_workspace"
#: file tool -> its path-like arguments
FILE_TOOL_PATH_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "read_file": ("path",),
    "write_file": ("path",),
    "list_dir": ("path",),
}


def limit_hits(result: ExecResult) -> list[str]:
    """Names of the sandbox limits one python call hit (see the module docstring). Never raises."""
    hits = []
    if result.timed_out:
        hits.append("timeout")
    if result.memory_exceeded:
        hits.append("memory")
    if result.output_truncated:
        hits.append("output_truncated")
    if result.exception == "BlockingIOError":
        hits.append("processes")
    if result.exception is not None and "[Errno 27]" in result.stderr:
        hits.append("file_size")
    if result.exception is not None and "[Errno 24]" in result.stderr:
        hits.append("open_files")
    if result.cpu_exceeded and not result.timed_out:
        hits.append("cpu")
    return hits


def path_escape(root: Path, path: Any) -> str | None:
    """Why ``path`` would leave the workspace ``root``, or None if it stays inside.

    Checks the text (absolute, ``~``, climbing out with ``..``) and the symbolic links that
    exist now under ``root`` along the path (a link whose target resolves outside ``root``).
    A non-string path is not an escape (the tool rejects it). Never raises.
    """
    if not isinstance(path, str):
        return None
    if path.startswith("/") or path.startswith("~"):
        return f"absolute path {path!r}"
    norm = posixpath.normpath(path) if path else "."
    if norm == ".." or norm.startswith("../"):
        return f"path {path!r} climbs out of the workspace"
    try:
        real_root = os.path.realpath(root)
        current = Path(root)
        for part in norm.split("/"):
            if part in ("", "."):
                continue
            current = current / part
            if current.is_symlink():
                target = os.path.realpath(current)
                if os.path.commonpath([real_root, target]) != real_root:
                    return f"path {path!r} goes through a symbolic link to {target!r}, outside the workspace"
            elif not current.exists():
                break
    except (OSError, ValueError):
        return None
    return None


class SandboxRiskDetector:
    """``(call, result) -> risk events`` for the tools of an :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox`.

    Args:
        sandbox: a function returning the current episode's sandbox (it changes at every
            reset), or None when no episode runs.
        python_tool: name under which the sandbox's ``python`` tool is offered.
        path_arguments: file tool name -> its path-like arguments.

    Never raises when called (the executor also guards it).
    """

    def __init__(
        self,
        sandbox: Callable[[], Any],
        *,
        python_tool: str = "python",
        path_arguments: Mapping[str, tuple[str, ...]] = FILE_TOOL_PATH_ARGUMENTS,
    ):
        self.sandbox = sandbox
        self.python_tool = python_tool
        self.path_arguments = dict(path_arguments)

    def __call__(self, call: ToolCall, result: ToolResult) -> list[RiskEvent]:
        """Risk events of one allowed call (shape of :func:`agentic_rl.tools.governance.executor.risk_event`)."""
        box = self.sandbox()
        if box is None:
            return []
        if call.name == self.python_tool:
            return limit_events(call, box.pop_last_result())
        return path_events(box.workspace, call, self.path_arguments.get(call.name, ()))


def limit_events(call: ToolCall, result: ExecResult | None) -> list[RiskEvent]:
    """One ``sandbox_limit`` event per limit ``result`` hit (none for None). Never raises."""
    return [
        risk_event(SANDBOX_LIMIT, call.name, f"sandbox limit hit: {hit}", call_id=call.id, rule=hit)
        for hit in (limit_hits(result) if result is not None else ())
    ]


def path_events(
    root: Path, call: ToolCall, arguments: tuple[str, ...] = ("path",)
) -> list[RiskEvent]:
    """One ``path_outside_workspace`` event per path argument of ``call`` that leaves ``root``.

    Never raises.
    """
    events = []
    for arg in arguments:
        why = path_escape(root, call.arguments.get(arg))
        if why is not None:
            events.append(
                risk_event(
                    PATH_OUTSIDE_WORKSPACE, call.name, why, call_id=call.id, rule=f"arguments.{arg}"
                )
            )
    return events
