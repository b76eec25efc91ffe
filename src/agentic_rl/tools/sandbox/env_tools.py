"""The tool side of an environment whose tools run in the sandbox, ready to use.

An env that offers the sandbox's ``python`` and workspace file tools holds one
:class:`SandboxedTools` and calls it from ``reset``, ``step``, ``snapshot``, ``restore`` and
``close``::

    self.sandboxed = SandboxedTools(SandboxConfig(), permissions, audit_path, run_id)
    # reset:   self.sandboxed.reset(trajectory_id)     -> a fresh sandbox (workspace, interpreter)
    # step:    report = self.sandboxed.execute(action, turn)   -> results + risk events
    # snapshot/restore: self.sandboxed.snapshot() / self.sandboxed.restore(snap)

What it guarantees:

* **No leaks between episodes.** ``reset`` closes the previous episode's sandbox (every process
  killed, workspace deleted) and opens a new one: empty workspace, no interpreter (a fresh one
  starts on the first ``python`` call).
* **One path for every call**: :class:`~agentic_rl.tools.governance.executor.ToolExecutor` (permission
  policy, audit record, observation) with the sandbox tools' risk detectors, so timeouts,
  memory and other limit hits become ``sandbox_limit`` events and file-tool paths outside the
  workspace ``path_outside_workspace`` events (:mod:`agentic_rl.tools.governance.risk_detector`).
* **Snapshots** of files + interpreter (:mod:`agentic_rl.tools.sandbox.snapshot`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agentic_rl.tools.definition.tool import DEFAULT_MAX_CHARS, Tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ExecutionReport, ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.snapshot import SandboxSnapshot, SnapshotError
from agentic_rl.types import Action

__all__ = ["SandboxedTools", "SANDBOX_TOOL_SIDE_EFFECTS"]

#: side-effect class of each sandbox tool in the default permission policy
SANDBOX_TOOL_SIDE_EFFECTS: Mapping[str, str] = {
    "python": "workspace_write",
    "read_file": "read_only",
    "write_file": "workspace_write",
    "list_dir": "read_only",
}


class SandboxedTools:
    """Sandboxed tools of one env instance: one :class:`EpisodeSandbox` per episode.

    Args:
        config: sandbox backend and limits.
        permissions: a ``[tools.permissions]`` table, a :class:`PermissionPolicy`, or None
            (allow the offered sandbox tools with the classes of :data:`SANDBOX_TOOL_SIDE_EFFECTS`
            and ``extra_tools`` as read-only; deny anything else).
        audit_path: JSON-lines audit log; None audits nothing.
        run_id: written into every audit record.
        names: which sandbox tools to offer (subset of ``python``, ``read_file``,
            ``write_file``, ``list_dir``).
        extra_tools: further tools offered next to them (not sandboxed: they run in-process).
        max_chars: longest observation shown to the policy.

    Raises:
        ValueError: an unknown sandbox tool name, or a wrong ``permissions`` key or value (named),
            or a ``permissions`` rule for a tool that is not offered (named, with the tools).
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        permissions: Mapping[str, Any] | PermissionPolicy | None = None,
        audit_path: str | None = None,
        run_id: str = "",
        *,
        names: Sequence[str] = tuple(SANDBOX_TOOL_SIDE_EFFECTS),
        extra_tools: Mapping[str, Tool] | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
    ):
        unknown = sorted(set(names) - set(SANDBOX_TOOL_SIDE_EFFECTS))
        if unknown:
            raise ValueError(
                f"unknown sandbox tools {unknown}; known: {sorted(SANDBOX_TOOL_SIDE_EFFECTS)}"
            )
        self.config = config or SandboxConfig()
        self.names = tuple(names)
        self.extra_tools = dict(extra_tools or {})
        if isinstance(permissions, PermissionPolicy):
            policy = permissions
        elif permissions is None:
            policy = PermissionPolicy.allow_all(
                {
                    **{n: SANDBOX_TOOL_SIDE_EFFECTS[n] for n in self.names},
                    **{n: "read_only" for n in self.extra_tools},
                }
            )
        else:
            policy = PermissionPolicy.from_dict(permissions)
        self.tools: dict[str, Tool] = {}  # the executor reads this dict; reset() refills it
        self.executor = ToolExecutor(
            self.tools,
            policy,
            AuditLog(audit_path) if audit_path else None,
            {"run_id": run_id},
            max_chars=max_chars,
        )
        self.sandbox: EpisodeSandbox | None = None
        self.trajectory_id = ""
        self._fill_tools(EpisodeSandbox(self.config), close=True)  # schemas before the first reset
        policy.check_tools(self.tools)  # the executor saw the dict still empty
        if permissions is not None:  # a rule for a tool these tools lack would never apply
            policy.check_tool_names(self.tools)

    def _fill_tools(self, box: EpisodeSandbox, *, close: bool = False) -> None:
        own = box.tools()
        self.tools.clear()
        self.tools.update({n: own[n] for n in self.names})
        self.tools.update(self.extra_tools)
        if close:
            box.close()

    def schemas(self) -> tuple[dict[str, Any], ...]:
        """JSON schemas of the offered tools, for the observation and the system prompt. Never raises."""
        return tuple(t.schema() for t in self.tools.values())

    def reset(self, trajectory_id: str | None = None) -> None:
        """End the previous episode's sandbox and start a fresh one (see the module docstring).

        ``trajectory_id`` names the episode in the audit log (a random id if None). Never
        raises (the interpreter starts lazily, on the first ``python`` call).
        """
        if self.sandbox is not None:
            self.sandbox.close()
        self.sandbox = EpisodeSandbox(self.config)
        self._fill_tools(self.sandbox)
        self.trajectory_id = str(trajectory_id or uuid.uuid4().hex)

    def execute(self, action: Action, turn: int) -> ExecutionReport:
        """Check, run and audit one turn's tool calls (see :meth:`ToolExecutor.execute`).

        Raises:
            RuntimeError: no episode was started with :meth:`reset`.
            OSError: the audit log cannot be written.
        """
        if self.sandbox is None:
            raise RuntimeError("SandboxedTools.execute() before reset()")
        return self.executor.execute(
            action.tool_calls, action.tool_call_errors, trajectory_id=self.trajectory_id, turn=turn
        )

    def snapshot(self) -> SandboxSnapshot:
        """Snapshot of the episode's files and interpreter (:meth:`EpisodeSandbox.snapshot`).

        Raises:
            SnapshotError: no episode runs, or the workspace is too large.
        """
        if self.sandbox is None:
            raise SnapshotError("no episode to snapshot: call reset() first")
        return self.sandbox.snapshot()

    def restore(self, snapshot: SandboxSnapshot, *, strict: bool = True) -> None:
        """Bring the episode's files and interpreter back to ``snapshot``.

        Starts a fresh sandbox first when none is open (e.g. a restore right after
        construction), so a snapshot can be restored into a new env instance.

        Raises:
            SnapshotError, SnapshotReplayError: see :meth:`EpisodeSandbox.restore`.
        """
        if self.sandbox is None or self.sandbox.closed:
            self.reset(self.trajectory_id or None)
        assert self.sandbox is not None
        self.sandbox.restore(snapshot, strict=strict)

    def close(self) -> None:
        """Kill the episode's processes and delete its workspace. Idempotent; never raises."""
        if self.sandbox is not None:
            self.sandbox.close()
