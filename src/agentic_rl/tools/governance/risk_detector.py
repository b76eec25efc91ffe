"""Risk detection for sandboxed tools: sandbox limit hits and paths outside the workspace.

The tools of an :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox` carry these detectors
(``Tool.risk_detector``), so any env that offers them through
:class:`~agentic_rl.tools.governance.executor.ToolExecutor` gets the events with no wiring
(an env that wraps the sandbox in tools of its own calls :func:`limit_events` and
:func:`path_events` from its tools' detectors, as swe-repo-v0 does). Detection runs after every
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
from pathlib import Path
from typing import Any

from agentic_rl.tools.governance.executor import risk_event
from agentic_rl.tools.sandbox.python_tool import ExecResult
from agentic_rl.types import RiskEvent, ToolCall

__all__ = [
    "SANDBOX_LIMIT",
    "PATH_OUTSIDE_WORKSPACE",
    "limit_hits",
    "limit_events",
    "path_escape",
    "path_events",
]

SANDBOX_LIMIT = "sandbox_limit"
PATH_OUTSIDE_WORKSPACE = "path_outside_workspace"


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
