"""Tools the policy can call: definitions, the tool-call parser, execution, and built-ins.

Data flow: the assistant text goes through :func:`parse_tool_calls` (calls and parser errors),
then :func:`execute_tool_calls` runs them against a ``{name: Tool}`` mapping and returns one
``ToolResult`` per call or error. :func:`render_tool_system_prompt` tells the policy which
tools exist and how to call them. :class:`ToolExecutor` is the one execution path of an env:
permission check (:class:`PermissionPolicy`) → execution → audit record (:class:`AuditLog`) →
observation, with risk events for the rubric. :class:`EpisodeSandbox` gives an episode the
sandboxed stateful ``python`` tool and workspace file tools (bubblewrap), with snapshots
(:mod:`agentic_rl.tools.sandbox.snapshot`) and risk detectors (:mod:`agentic_rl.tools.governance.risk_detector`);
:class:`SandboxedTools` bundles sandbox, executor and detectors for an env.

Layer rule: this package imports only the standard library and :mod:`agentic_rl.types`.
"""

from agentic_rl.tools.definition.calculator import CalculatorError, calculator, evaluate_arithmetic
from agentic_rl.tools.definition.parser import format_tool_call, parse_tool_calls
from agentic_rl.tools.definition.prompt import render_tool_system_prompt
from agentic_rl.tools.definition.tool import Tool, ToolArgumentError, execute_tool_calls, tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ExecutionReport, ToolExecutor
from agentic_rl.tools.governance.permissions import Decision, PermissionPolicy
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, SandboxError, SandboxUnavailableError
from agentic_rl.tools.sandbox.env_tools import SandboxedTools
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.snapshot import SandboxSnapshot, SnapshotError, SnapshotReplayError

__all__ = [
    "Tool",
    "tool",
    "ToolArgumentError",
    "execute_tool_calls",
    "parse_tool_calls",
    "format_tool_call",
    "calculator",
    "evaluate_arithmetic",
    "CalculatorError",
    "render_tool_system_prompt",
    "AuditLog",
    "Decision",
    "EpisodeSandbox",
    "ExecutionReport",
    "PermissionPolicy",
    "SandboxConfig",
    "SandboxError",
    "SandboxSnapshot",
    "SandboxUnavailableError",
    "SandboxedTools",
    "SnapshotError",
    "SnapshotReplayError",
    "ToolExecutor",
]
