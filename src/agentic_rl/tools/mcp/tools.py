"""The tools of MCP servers as agent tools: :class:`McpTools`, the MCP side of one env instance.

Mapping (MCP specification 2025-06-18, "Tools"): each tool of ``tools/list`` becomes one
:class:`~agentic_rl.tools.definition.tool.Tool`:

=======================  ==========================================================================
MCP                      agentic-rl
=======================  ==========================================================================
``name``                 ``Tool.name`` = the spec's ``prefix`` + name
``description``          ``Tool.description`` (else ``title``, else "")
``inputSchema``          ``Tool.parameters`` as given (``"type": "object"`` added if missing);
                         checked by ``Tool.validate`` for the keywords it knows (types, required,
                         enums, items, properties), the rest by the server
``annotations``          the permission class of the default policy
                         (:meth:`~agentic_rl.tools.mcp.spec.McpServerSpec.side_effect_of`)
``tools/call`` result    the observation: text blocks joined (other blocks named);
                         ``isError`` -> ``Error: McpToolError: <text>``
=======================  ==========================================================================

The tools are called like every other tool, by
:class:`~agentic_rl.tools.governance.executor.ToolExecutor`: the permission policy decides first
(a denied MCP call never reaches the server), every call is audited, and the tools' risk
detector adds ``sandbox_limit`` events (reason ``mcp_timeout`` or ``mcp_server_failed``) when a
server hangs or dies. A failure is an error observation, never an exception out of ``step``.

Lifecycle: the tool list of a spec is read once per process (a short-lived session; cached by
spec, so the envs a trainer builds every step do not each start a server). Servers are
**per episode** and lazy: the first call of an episode to a server's tool opens a session (a
stdio server starts, in the sandbox by default); :meth:`McpTools.end_episode` closes all of them
(the env calls it at the end of every episode, at the next reset and on close). A server that
hung or died is stopped; the next call of the episode starts a fresh one (its state is lost,
and the observation of the failed call says so). An HTTP server is not ours to stop: a
session is only a connection to it, and its state is whatever the server keeps.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.executor import risk_event
from agentic_rl.tools.mcp.session import McpSession
from agentic_rl.tools.mcp.spec import McpServerSpec
from agentic_rl.types import RiskEvent, ToolCall, ToolResult

__all__ = ["McpTools", "McpToolInfo", "discover_tools", "mcp_unavailable_reason"]

#: observation prefixes (``Error: <exception class>:``) of MCP failures -> risk event reason
_FAILURES = {
    "Error: McpTimeoutError:": "mcp_timeout",
    "Error: McpServerError:": "mcp_server_failed",
}


def mcp_unavailable_reason() -> str | None:
    """Why MCP tools cannot be used here (fastmcp missing), or None. Never raises."""
    try:
        import fastmcp  # noqa: F401
    except ImportError as exc:
        return f"fastmcp is not installed ({exc}); install it with: pip install 'agentic-rl[mcp]'"
    return None


@dataclass(frozen=True)
class McpToolInfo:
    """One tool as a server lists it (``tools/list``).

    Attributes:
        name: the server's name of the tool.
        description: its description (or title), "" if none.
        input_schema: JSON Schema of its arguments (an object schema).
        annotations: the MCP tool annotations given (``readOnlyHint``, ...), as a dict.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]


_DISCOVERED: dict[McpServerSpec, tuple[McpToolInfo, ...]] = {}
_DISCOVER_LOCK = threading.Lock()


def discover_tools(spec: McpServerSpec) -> tuple[McpToolInfo, ...]:
    """The server's tools, read once per process and spec (a short-lived session).

    Raises:
        McpServerError: the server could not start or list its tools.
        SandboxUnavailableError: a bwrap-sandboxed stdio server on a host without bubblewrap.
        ImportError: fastmcp is not installed.
    """
    with _DISCOVER_LOCK:
        if spec not in _DISCOVERED:
            session = McpSession(spec).start()
            try:
                listed = session.list_tools()
            finally:
                session.close()
            _DISCOVERED[spec] = tuple(_info(t) for t in listed)
        return _DISCOVERED[spec]


def _info(tool: Any) -> McpToolInfo:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    hints = tool.annotations
    annotations = hints.model_dump(by_alias=True, exclude_none=True) if hints else {}
    return McpToolInfo(
        tool.name, tool.description or getattr(tool, "title", None) or "", schema, annotations
    )


def _mcp_risk(call: ToolCall, result: ToolResult) -> list[RiskEvent]:
    """``sandbox_limit`` event of a call whose server hung or died (from the observation)."""
    for prefix, reason in _FAILURES.items():
        if not result.ok and result.content.startswith(prefix):
            return [risk_event("sandbox_limit", call.name, reason, call_id=call.id)]
    return []


def _close_all(sessions: dict[str, McpSession]) -> None:
    for session in list(sessions.values()):
        session.close()
    sessions.clear()


class McpTools:
    """The MCP tools of one env instance, with one session per server and episode.

    Args:
        servers: server specs, as :class:`McpServerSpec` or ``mcp_servers`` tables.

    Attributes:
        specs: the parsed specs.
        tools: ``{name: Tool}`` of every offered MCP tool, in server then listing order.
        side_effects: ``{tool name: permission class}`` for the env's default policy.

    Raises:
        ValueError: a bad spec, two servers with one name, two tools with one name, or a
            ``tools`` entry the server does not list.
        McpServerError, SandboxUnavailableError, ImportError: see :func:`discover_tools`.
    """

    def __init__(self, servers: Sequence[McpServerSpec | Mapping[str, Any]]):
        self.specs = tuple(McpServerSpec.from_dict(s) for s in servers)
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise ValueError(f"mcp_servers: two servers share a name: {names}")
        self.tools: dict[str, Tool] = {}
        self.side_effects: dict[str, str] = {}
        self._sessions: dict[str, McpSession] = {}
        self._lock = threading.Lock()
        # sessions outlive a forgotten env otherwise (their threads hold them)
        self._finalizer = weakref.finalize(self, _close_all, self._sessions)
        for spec in self.specs:
            self._add(spec, discover_tools(spec))

    def _add(self, spec: McpServerSpec, listed: tuple[McpToolInfo, ...]) -> None:
        by_name = {info.name: info for info in listed}
        missing = sorted(set(spec.tools or ()) - set(by_name))
        if missing:
            raise ValueError(
                f"mcp server {spec.name!r} lists no tool(s) {missing}; it has {sorted(by_name)}"
            )
        for info in listed if spec.tools is None else [by_name[n] for n in spec.tools]:
            name = spec.prefix + info.name
            if name in self.tools:
                raise ValueError(f"two MCP tools are named {name!r}: set a prefix on a server")
            self.tools[name] = Tool(
                name=name,
                description=info.description,
                parameters=info.input_schema,
                fn=self._caller(spec, info.name),
                risk_detector=_mcp_risk,
            )
            self.side_effects[name] = spec.side_effect_of(info.name, info.annotations)

    def _caller(self, spec: McpServerSpec, tool: str) -> Any:
        def call(**arguments: Any) -> str:
            return self._session(spec).call(tool, arguments)

        call.__name__ = f"mcp_{spec.name}_{tool}"
        return call

    def _session(self, spec: McpServerSpec) -> McpSession:
        with self._lock:
            session = self._sessions.get(spec.name)
            if session is None or session.closed:
                session = McpSession(spec).start()
                self._sessions[spec.name] = session
            return session

    def live_sessions(self) -> dict[str, McpSession]:
        """The open sessions by server name (servers called in this episode). Never raises."""
        return {n: s for n, s in self._sessions.items() if not s.closed}

    def end_episode(self) -> None:
        """Close every session of the episode (stdio servers stopped). Idempotent; never raises."""
        with self._lock:
            _close_all(self._sessions)

    def close(self) -> None:
        """Same as :meth:`end_episode` (nothing else is held). Never raises."""
        self.end_episode()
