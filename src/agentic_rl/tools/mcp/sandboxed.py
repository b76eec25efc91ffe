"""The command line that starts a stdio MCP server inside the bubblewrap sandbox.

A stdio server (MCP specification 2025-06-18, "Transports: stdio") is a subprocess the client
starts and talks to over its stdin/stdout. With ``sandbox = "bwrap"`` (the default) the client
starts ``bwrap … -- <command> <args>`` instead of the bare command, built from the same pieces as
the sandbox of the ``python`` tool (:mod:`agentic_rl.tools.sandbox.bwrap`):

=============================  ==============================================================
Isolated                       How
=============================  ==============================================================
network                        ``--unshare-net`` (loopback only), unless the spec sets
                               ``network = true``
processes, IPC, hostname       ``--unshare-pid``, ``--unshare-ipc``, ``--unshare-uts``,
                               ``--die-with-parent``, ``--new-session``; stopping the session
                               kills bwrap and with it every process of the server
file system                    the system directories, a few ``/etc`` loader files and the
                               Python prefixes read-only (as for the ``python`` tool); the
                               spec's ``ro_paths`` read-only and ``rw_paths`` read-write at
                               their host paths; ``/workspace``: a fresh, empty host directory
                               per session, the server's working directory and ``HOME``,
                               deleted when the session closes; private ``/tmp``
environment                    ``--clearenv``: only ``PATH``, ``HOME``, ``LANG`` and the
                               spec's ``env``
user namespaces                the seccomp filter of :mod:`agentic_rl.tools.sandbox.seccomp`
                               (``bwrap --seccomp``, read from a file by a ``sh`` wrapper,
                               because the MCP client starts the process itself and passes no
                               descriptors)
time                           every call has ``call_timeout_s``; a server that overruns it
                               is stopped (:mod:`agentic_rl.tools.mcp.session`)
=============================  ==============================================================

Not isolated, unlike the ``python`` tool's sandbox: the server runs as the host user (no drop
to a per-episode uid: there is no worker process in between to drop privileges; it has no
capabilities), and it has no rlimits and no cgroup (memory, CPU and process count are not
bounded). The kernel is shared with the host, as for every bwrap sandbox.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from agentic_rl.tools.mcp.spec import McpServerSpec
from agentic_rl.tools.sandbox.bwrap import (
    SandboxConfig,
    SandboxUnavailableError,
    _host_mounts,
    _probe_bwrap,
)
from agentic_rl.tools.sandbox.seccomp import user_namespace_filter

__all__ = ["sandboxed_server_command"]

#: ``sh -c`` script: open the seccomp filter file as descriptor 3, then run the bwrap command
_WRAPPER = 'exec 3<"$1"; shift; exec "$@"'


def sandboxed_server_command(
    spec: McpServerSpec, workspace: Path, private_dir: Path, env: Mapping[str, str]
) -> tuple[str, list[str]]:
    """``(command, args)`` that start ``spec``'s stdio server in bubblewrap (module docstring).

    Args:
        spec: a stdio server spec.
        workspace: the session's host directory, mounted read-write at ``/workspace``.
        private_dir: a host directory outside the workspace for the seccomp filter file.
        env: the variables set inside (``spec.env`` and the session's marker), after
            ``PATH``, ``HOME`` and ``LANG``.

    Raises:
        SandboxUnavailableError: bubblewrap is missing or cannot create namespaces.
        ValueError: ``spec.command`` is not found on ``PATH`` (nor is an absolute path).
    """
    problem = _probe_bwrap()
    if problem:
        raise SandboxUnavailableError(problem)
    executable = spec.command if spec.command.startswith("/") else shutil.which(spec.command)
    if not executable:
        raise ValueError(f"mcp server {spec.name!r}: command {spec.command!r} not found on PATH")
    bwrap = shutil.which("bwrap") or "bwrap"
    cmd = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not spec.network:
        cmd.append("--unshare-net")
    cmd += ["--die-with-parent", "--new-session", "--hostname", "mcp-sandbox"]
    cmd += _host_mounts(SandboxConfig())
    if spec.network:
        for name in ("resolv.conf", "hosts", "nsswitch.conf", "ssl", "ca-certificates"):
            if Path("/etc", name).exists():
                cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for path in spec.ro_paths:
        cmd += ["--ro-bind", path, path]
    for path in spec.rw_paths:
        cmd += ["--bind", path, path]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--bind", str(workspace), "/workspace"]
    cmd += ["--chdir", spec.cwd or "/workspace", "--clearenv"]
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace", "LANG": "C.UTF-8"}
    for key, value in {**base, **env}.items():
        cmd += ["--setenv", key, value]
    program = user_namespace_filter()
    if program is None:  # an architecture the filter does not know: run without it
        return cmd[0], [*cmd[1:], "--", executable, *spec.args]
    filter_path = private_dir / "seccomp.bpf"
    filter_path.write_bytes(program)
    sh = shutil.which("sh") or "/bin/sh"
    wrapped = [*cmd, "--seccomp", "3", "--", executable, *spec.args]
    return sh, ["-c", _WRAPPER, "sh", str(filter_path), *wrapped]
