"""What an MCP server is to agentic-rl: :class:`McpServerSpec`, read from config as a plain table.

An env's ``mcp_servers`` argument (``[env.kwargs] mcp_servers = [...]`` in TOML) is a list of
tables, one per server::

    [[env.kwargs.mcp_servers]]
    name = "notes"                          # names the server in errors and in the audit log
    command = "/usr/bin/python3"            # stdio: the server is this process, one per episode
    args = ["/opt/notes_server.py"]
    ro_paths = ["/opt/notes_server.py"]     # host paths the sandboxed server may read
    side_effects = { write_note = "workspace_write" }   # permission class per tool
    call_timeout_s = 30.0
    limits = { memory_bytes = 1073741824, max_processes = 64 }   # the sandbox's limits

    [[env.kwargs.mcp_servers]]
    name = "search"
    url = "http://127.0.0.1:8000/mcp"       # streamable HTTP: a server that runs on its own

Transports are those of the MCP specification (2025-06-18, "Transports"): **stdio** (the client
starts the server as a subprocess and speaks JSON-RPC over its stdin/stdout) and **streamable
HTTP** (the server runs independently; the client POSTs JSON-RPC to one endpoint). The
transport follows from the keys: ``command`` means stdio, ``url`` means HTTP.

Permission classes. The default permission policy of an env gives each MCP tool the class
``side_effects[tool]`` when the spec names one, else the class its MCP tool annotations imply
(spec "Tool annotations": ``readOnlyHint`` -> ``read_only``; else ``openWorldHint`` -> ``network``;
else ``destructiveHint`` -> ``irreversible``; else ``workspace_write``), with the spec's defaults
for missing hints (``readOnlyHint = false``, ``destructiveHint = true``, ``openWorldHint = true``).
A tool with no annotations is therefore ``network`` and denied by default: the specification
says annotations are untrusted hints, so the safe reading is the default one. A
``[tools.permissions]`` table replaces the default policy as for any tool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_rl.tools.governance.permissions import SIDE_EFFECTS
from agentic_rl.tools.sandbox.bwrap import SandboxConfig

__all__ = ["McpServerSpec", "side_effect_from_annotations"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
#: the longest ``call_timeout_s`` / ``startup_timeout_s`` (a day): a finite wait, in the range
#: Python's timers take (``threading.TIMEOUT_MAX``)
MAX_TIMEOUT_S = 86_400.0
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,32}$")
_KEYS = {
    "name",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "sandbox",
    "network",
    "ro_paths",
    "rw_paths",
    "tools",
    "prefix",
    "side_effects",
    "call_timeout_s",
    "startup_timeout_s",
    "limits",
}
#: keys of a spec's ``limits`` table: the :class:`SandboxConfig` fields that apply to a server's
#: sandbox, and ``max_stderr_bytes`` (how much of its stderr is kept)
LIMIT_KEYS = (
    "memory_bytes",
    "cpu_seconds",
    "max_processes",
    "max_file_bytes",
    "max_open_files",
    "tmp_bytes",
    "workspace_bytes",
    "workspace_inodes",
    "cgroup_parent",
    "require_whole_limits",
    "max_stderr_bytes",
)
#: default of ``limits.max_stderr_bytes``: the tail of the server's stderr kept for error messages
MAX_STDERR_BYTES = 64 << 10


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _string_map(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{where} must be a table of strings, got {value!r}")
    return tuple(sorted(value.items()))


@dataclass(frozen=True)
class McpServerSpec:
    """One MCP server whose tools an env offers (table keys as in the module docstring).

    Attributes:
        name: 1-32 chars of ``[A-Za-z0-9_-]``; names the server in observations and logs.
        transport: ``"stdio"`` (``command`` given) or ``"http"`` (``url`` given).
        command: stdio: the executable (absolute, or found on ``PATH``).
        args: stdio: its arguments.
        env: stdio: environment variables set for the server (inside the sandbox, the only
            ones besides ``PATH``, ``HOME=/workspace`` and ``LANG``).
        cwd: stdio: working directory; default: the episode's workspace.
        url: http: the server's MCP endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        headers: http: headers sent with every request (e.g. an authorization token).
        sandbox: stdio: ``"bwrap"`` (default: the server runs in a bubblewrap sandbox, see
            :mod:`agentic_rl.tools.mcp.sandboxed`) or ``"none"`` (a plain child process with
            this process's permissions; for trusted servers or hosts without namespaces).
        network: stdio + bwrap: keep the host's network (default False: loopback only).
        ro_paths: stdio + bwrap: absolute host paths mounted read-only at the same place
            (the server script, its data); the system and Python prefixes always are.
        rw_paths: stdio + bwrap: absolute host paths mounted read-write at the same place.
        tools: names of the server's tools to offer; None offers all of them.
        prefix: prepended to every tool name the policy sees (e.g. ``"notes."``); default none.
        side_effects: ``{server tool name: permission class}``, overriding the annotations.
        call_timeout_s: longest wait for one tool call, in (0, :data:`MAX_TIMEOUT_S`] seconds;
            a stdio server that overruns it is stopped (a fresh one starts on the next call).
        startup_timeout_s: longest wait for the server to start and answer ``initialize``, in
            (0, :data:`MAX_TIMEOUT_S`] seconds.
        limits: stdio: ``{key: value}`` for :data:`LIMIT_KEYS`, over the defaults of
            :class:`~agentic_rl.tools.sandbox.bwrap.SandboxConfig` (the ``python`` tool's
            limits: 1 GiB address space per process, 64 processes, 60 s of CPU per process,
            16 MiB per file, 256 open files, a 256 MiB workspace, a 64 MiB ``/tmp``) and
            ``max_stderr_bytes`` (:data:`MAX_STDERR_BYTES`); see :meth:`sandbox_config`.

    Raises:
        ValueError: on construction, for a bad name, prefix, transport, class, path or limit.
    """

    name: str
    transport: Literal["stdio", "http"] = "stdio"
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    sandbox: Literal["bwrap", "none"] = "bwrap"
    network: bool = False
    ro_paths: tuple[str, ...] = ()
    rw_paths: tuple[str, ...] = ()
    tools: tuple[str, ...] | None = None
    prefix: str = ""
    side_effects: tuple[tuple[str, str], ...] = field(default=())
    call_timeout_s: float = 30.0
    startup_timeout_s: float = 60.0
    limits: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        where = f"mcp server {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"mcp server name {self.name!r}: use 1-32 chars of [A-Za-z0-9_-]")
        if self.transport not in ("stdio", "http"):
            raise ValueError(f"{where}: transport must be 'stdio' or 'http'")
        if self.transport == "stdio" and (not self.command or self.url):
            raise ValueError(f"{where}: a stdio server needs 'command' and no 'url'")
        if self.transport == "http" and (self.command or not self.url.startswith("http")):
            raise ValueError(f"{where}: an http server needs an http(s) 'url' and no 'command'")
        if self.sandbox not in ("bwrap", "none"):
            raise ValueError(f"{where}: sandbox must be 'bwrap' or 'none', got {self.sandbox!r}")
        if not _PREFIX.match(self.prefix):
            raise ValueError(f"{where}: prefix {self.prefix!r}: use 0-32 chars of [A-Za-z0-9_.-]")
        for path in (*self.ro_paths, *self.rw_paths):
            if not path.startswith("/"):
                raise ValueError(f"{where}: ro_paths/rw_paths must be absolute, got {path!r}")
        for tool, cls in self.side_effects:
            if cls not in SIDE_EFFECTS:
                raise ValueError(
                    f"{where}: side_effects.{tool} must be one of {', '.join(SIDE_EFFECTS)}"
                )
        for key in ("call_timeout_s", "startup_timeout_s"):
            if not 0 < getattr(self, key) <= MAX_TIMEOUT_S:  # also false for nan
                raise ValueError(
                    f"{where}: {key} must be > 0 and <= {MAX_TIMEOUT_S:g} seconds, "
                    f"got {getattr(self, key)!r}"
                )
        self._check_limits(where)

    def _check_limits(self, where: str) -> None:
        for key, value in self.limits:
            if key not in LIMIT_KEYS:
                raise ValueError(
                    f"{where}: unknown limits key {key!r} (allowed: {', '.join(LIMIT_KEYS)})"
                )
            kind = str if key == "cgroup_parent" else bool if key == "require_whole_limits" else int
            if type(value) is not kind:
                what = {str: "a path", bool: "true or false", int: "an integer"}[kind]
                raise ValueError(f"{where}: limits.{key} must be {what}, got {value!r}")
            if kind is int and not 0 < value <= 1 << 62:
                raise ValueError(f"{where}: limits.{key} must be in [1, 2**62], got {value}")
        if not 0 < self.max_stderr_bytes <= 1 << 30:
            raise ValueError(f"{where}: limits.max_stderr_bytes must be in [1, 2**30]")
        try:
            self.sandbox_config()
        except ValueError as exc:
            raise ValueError(f"{where}: limits: {exc}") from None

    @property
    def max_stderr_bytes(self) -> int:
        """How many bytes of the server's stderr are kept (the last ones). Never raises."""
        return int(dict(self.limits).get("max_stderr_bytes", MAX_STDERR_BYTES))

    def sandbox_config(self) -> SandboxConfig:
        """The limits of this stdio server's sandbox (``limits`` over the defaults).

        Raises:
            ValueError: a limit is out of range (e.g. not positive).
        """
        own = {k: v for k, v in self.limits if k != "max_stderr_bytes"}
        return SandboxConfig(**own)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> McpServerSpec:
        """Build a spec from one ``mcp_servers`` table (keys in the module docstring).

        Raises:
            ValueError: an unknown key (named), a value of the wrong type, or an invalid spec.
        """
        if isinstance(data, McpServerSpec):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"an mcp_servers entry must be a table, got {type(data).__name__}")
        unknown = sorted(set(data) - _KEYS)
        name = data.get("name", "")
        if unknown:
            raise ValueError(
                f"mcp server {name!r}: unknown key(s) {unknown} (allowed: {', '.join(sorted(_KEYS))})"
            )
        where = f"mcp server {name!r}:"
        values: dict[str, Any] = {k: v for k, v in data.items() if k in ("name", "url", "cwd")}
        values["transport"] = "http" if data.get("url") else "stdio"
        values["command"] = data.get("command", "")
        for key in ("args", "ro_paths", "rw_paths"):
            values[key] = _strings(data.get(key, ()), f"{where} {key}")
        if data.get("tools") is not None:
            values["tools"] = _strings(data["tools"], f"{where} tools")
        for key in ("env", "headers", "side_effects"):
            values[key] = _string_map(data.get(key, {}), f"{where} {key}")
        limits = data.get("limits", {})
        if not isinstance(limits, Mapping):
            raise ValueError(f"{where} limits must be a table, got {limits!r}")
        values["limits"] = tuple(sorted(limits.items()))
        for key in ("sandbox", "prefix"):
            if key in data:
                values[key] = data[key]
        values["network"] = bool(data.get("network", False))
        for key in ("call_timeout_s", "startup_timeout_s"):
            if key in data:
                try:
                    values[key] = float(data[key])
                except (TypeError, ValueError, OverflowError):
                    raise ValueError(f"{where} {key} must be a number, got {data[key]!r}") from None
        return cls(**values)

    def side_effect_of(self, tool: str, annotations: Mapping[str, Any] | None) -> str:
        """The permission class of server tool ``tool`` (module docstring). Never raises."""
        explicit = dict(self.side_effects).get(tool)
        return explicit or side_effect_from_annotations(annotations)


def side_effect_from_annotations(annotations: Mapping[str, Any] | None) -> str:
    """Permission class implied by MCP tool annotations (``readOnlyHint``, ``destructiveHint``,
    ``openWorldHint``), with the MCP specification's defaults for missing hints. Never raises."""
    hints = dict(annotations or {})
    if hints.get("readOnlyHint", False) is True:
        return "read_only"
    if hints.get("openWorldHint", True) is not False:
        return "network"
    if hints.get("destructiveHint", True) is not False:
        return "irreversible"
    return "workspace_write"
