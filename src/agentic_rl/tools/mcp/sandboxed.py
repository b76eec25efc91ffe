"""The command line that starts a stdio MCP server inside the bubblewrap sandbox, with limits.

A stdio server (MCP specification 2025-06-18, "Transports: stdio") is a subprocess the client
starts and talks to over its stdin/stdout. With ``sandbox = "bwrap"`` (the default) the client
starts ``bwrap … -- python worker.py SETTINGS`` instead of the bare command: the ``python``
tool's worker (:mod:`agentic_rl.tools.sandbox._sandbox_worker`) in its exec mode sets the limits,
drops to the session's uid and then ``execv``-s the server. It is built from the same pieces as
the sandbox of the ``python`` tool (:mod:`agentic_rl.tools.sandbox.bwrap`); the session
(:mod:`agentic_rl.tools.mcp.session`) adds the whole-sandbox limits around it:

=============================  ==============================================================
Isolated                       How
=============================  ==============================================================
network                        ``--unshare-net`` (loopback only), unless the spec sets
                               ``network = true``
processes, IPC, hostname       ``--unshare-pid``, ``--unshare-ipc``, ``--unshare-uts``,
                               ``--die-with-parent``, ``--new-session``; stopping the session
                               kills bwrap and with it every process of the server
identity (host runs as root)   bwrap keeps only ``CAP_SETUID``/``CAP_SETGID``/``CAP_SETPCAP``
                               (``--cap-drop ALL``); the launcher empties the capability
                               bounding set and the inheritable set, then switches to a
                               per-session unprivileged uid and a per-server gid (no
                               supplementary groups),
                               which clears every capability (checked before the ``execv``);
                               ``no_new_privs`` is set, so set-uid binaries gain nothing. A
                               host that is not root: ``--unshare-user``, no capability
file system                    the system directories, a few ``/etc`` loader files and the
                               Python prefixes read-only (as for the ``python`` tool); the
                               spec's ``ro_paths`` read-only and ``rw_paths`` read-write at
                               their host paths (accessed as the session's uid and the server's
                               gid, umask 002: they must be readable, or writable, by others or
                               that gid); ``/workspace``: a fresh
                               directory per session, the server's working directory and
                               ``HOME``, deleted when the session closes; private ``/tmp``
                               (tmpfs of ``tmp_bytes``)
environment                    ``--clearenv``: only ``PATH``, ``HOME``, ``LANG`` and the
                               spec's ``env``
user namespaces                the seccomp filter of :mod:`agentic_rl.tools.sandbox.seccomp`
                               (``bwrap --seccomp``, read from a file by a ``sh`` wrapper,
                               because the MCP client starts the process itself and passes no
                               descriptors)
resources per process          the ``python`` tool's rlimits, from the spec's ``limits``:
                               ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE``,
                               ``RLIMIT_NOFILE``, ``RLIMIT_CPU``, no core files;
                               ``oom_score_adj`` 1000 (the OOM killer's first choice)
resources of the whole server  as for the ``python`` tool (:mod:`agentic_rl.tools.sandbox.limits`):
                               the workspace is a tmpfs of ``workspace_bytes`` (root host), and
                               the server joins its own cgroup (memory, processes) before it
                               starts, where the host allows one; stderr goes to a pipe of which
                               the host keeps the last ``max_stderr_bytes``
time                           every call has ``call_timeout_s``; a server that overruns it
                               is stopped (:mod:`agentic_rl.tools.mcp.session`)
a killed trainer               the session's processes, cgroup, mount and directory are
                               registered with the trainer's child-server watchdog
                               (:mod:`agentic_rl.processes`)
=============================  ==============================================================

Not isolated: the kernel is shared with the host, as for every bwrap sandbox. ``rw_paths`` are
host directories: only ``RLIMIT_FSIZE`` (per file) bounds what the server writes there. Where
the host has no usable cgroup (a non-root host without delegated cgroup v2), memory and process
count are bounded per process only (``limits.require_whole_limits`` refuses to start instead).
``sandbox = "none"`` (a trusted server) runs the server as a plain child process with the same
rlimits, workspace tmpfs and cgroup, but as the host user with its capabilities.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from agentic_rl.tools.mcp.spec import McpServerSpec
from agentic_rl.tools.sandbox.bwrap import (
    WORKER_PATH,
    SandboxConfig,
    SandboxUnavailableError,
    _host_mounts,
    _mount_dirs,
    _probe_bwrap,
    privilege_args,
    worker_settings,
)
from agentic_rl.tools.sandbox.seccomp import user_namespace_filter

__all__ = ["launcher_argv", "sandboxed_server_command", "server_executable"]

#: ``sh -c`` script: open the seccomp filter file as descriptor 3, then run the bwrap command
_WRAPPER = 'exec 3<"$1"; shift; exec "$@"'
_SANDBOX_WORKER = "/opt/agentic_rl/worker.py"


def server_executable(spec: McpServerSpec) -> str:
    """The absolute path of ``spec.command``.

    Raises:
        ValueError: it is not found on ``PATH`` (nor is an absolute path).
    """
    executable = spec.command if spec.command.startswith("/") else shutil.which(spec.command)
    if not executable:
        raise ValueError(f"mcp server {spec.name!r}: command {spec.command!r} not found on PATH")
    return executable


def launcher_argv(
    spec: McpServerSpec,
    config: SandboxConfig,
    uid: int | None,
    *,
    worker: str,
    cwd: str | None,
    gid: int | None = None,
) -> list[str]:
    """``python -I -S worker SETTINGS``: the worker's exec mode, which applies ``config``'s
    rlimits and ``oom_score_adj``, drops to ``uid`` and ``gid`` (when given; then with umask
    002, so files the server makes in ``rw_paths`` stay writable by its later sessions, which
    share the gid), enters ``cwd`` and then execs the server. ``worker``: the worker script's
    path where it runs.

    Raises:
        ValueError: ``spec.command`` is not found.
    """
    settings = worker_settings(config, uid, "")
    settings.update(exec=[server_executable(spec), *spec.args], cwd=cwd, gid=gid)
    settings["umask"] = 0o002 if uid is not None else None
    return [sys.executable, "-I", "-S", worker, json.dumps(settings)]


def sandboxed_server_command(
    spec: McpServerSpec,
    workspace: Path,
    private_dir: Path,
    env: Mapping[str, str],
    uid: int | None = None,
    gid: int | None = None,
) -> list[str]:
    """The argv that starts ``spec``'s stdio server in bubblewrap (module docstring).

    Args:
        spec: a stdio server spec (its ``limits`` give the sandbox's limits).
        workspace: the session's host directory, mounted read-write at ``/workspace``.
        private_dir: a host directory outside the workspace for the seccomp filter file.
        env: the variables set inside (``spec.env`` and the session's marker), after
            ``PATH``, ``HOME`` and ``LANG``.
        uid: the unprivileged uid the server runs as (a root host); None: the host user's, in
            a user namespace.
        gid: its gid (default: ``uid``).

    Raises:
        SandboxUnavailableError: bubblewrap is missing or cannot create namespaces.
        ValueError: ``spec.command`` is not found on ``PATH`` (nor is an absolute path).
    """
    problem = _probe_bwrap()
    if problem:
        raise SandboxUnavailableError(problem)
    config = spec.sandbox_config()
    cwd = spec.cwd or "/workspace"
    launcher = launcher_argv(spec, config, uid, worker=_SANDBOX_WORKER, cwd=cwd, gid=gid)
    bwrap = shutil.which("bwrap") or "bwrap"
    cmd = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not spec.network:
        cmd.append("--unshare-net")
    cmd += ["--die-with-parent", "--new-session", "--hostname", "mcp-sandbox"]
    cmd += privilege_args()
    created: set[str] = set()
    cmd += _host_mounts(config, created)
    if spec.network:
        for name in ("resolv.conf", "hosts", "nsswitch.conf", "ssl", "ca-certificates"):
            if Path("/etc", name).exists():
                cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for path in spec.ro_paths:  # parents made 0755: the server's uid must traverse them
        cmd += _mount_dirs(path, created) + ["--ro-bind", path, path]
    for path in spec.rw_paths:
        cmd += _mount_dirs(path, created) + ["--bind", path, path]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--bind", str(workspace), "/workspace"]
    cmd += ["--ro-bind", str(WORKER_PATH), _SANDBOX_WORKER]
    cmd += ["--chdir", "/", "--clearenv"]  # the launcher enters the 0700 workspace as the uid
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace", "LANG": "C.UTF-8"}
    for key, value in {**base, **env}.items():
        cmd += ["--setenv", key, value]
    program = user_namespace_filter()
    if program is None:  # an architecture the filter does not know: run without it
        return [*cmd, "--", *launcher]
    filter_path = private_dir / "seccomp.bpf"
    filter_path.write_bytes(program)
    sh = shutil.which("sh") or "/bin/sh"
    return [sh, "-c", _WRAPPER, "sh", str(filter_path), *cmd, "--seccomp", "3", "--", *launcher]
