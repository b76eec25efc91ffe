"""The sandbox that tool code runs in: bubblewrap namespaces plus resource limits.

Every episode gets its own sandbox (see :class:`agentic_rl.tools.sandbox.episode.EpisodeSandbox`): a
fresh host temp directory mounted read-write as ``/workspace`` and a long-lived Python
interpreter started through :func:`sandbox_command`. Backends:

- ``"bwrap"`` (default): `bubblewrap <https://github.com/containers/bubblewrap>`_ (Debian
  package ``bubblewrap``). If it is missing or cannot create namespaces, starting a sandbox
  raises :class:`SandboxUnavailableError`; nothing falls back silently.
- ``"unsafe_local"``: runs the interpreter as a plain child process with **only the resource
  limits** (and the wall-clock timeout, the output caps and the workspace as its cwd). It
  isolates nothing else; use it only for trusted code or on machines without namespaces.
  Choosing it logs a warning.

What the ``bwrap`` backend isolates and what it does not:

=============================  ==============================================================
Isolated                       How
=============================  ==============================================================
network                        ``--unshare-net``: an empty network namespace (loopback only,
                               not the host's), so no host or internet socket is reachable
processes                      ``--unshare-pid``: own PID namespace, host processes invisible;
                               ``--die-with-parent``; killing the bwrap process kills the
                               namespace's init, so the kernel kills every process in it
                               (daemons included)
file system                    only ``/usr``, ``/bin``, ``/lib*``, a few ``/etc`` loader files,
                               ``sys.prefix`` and ``sys.base_prefix`` are mounted, read-only;
                               ``/workspace`` (this episode's dir) is the only writable host
                               path; private ``/tmp`` (tmpfs, size-capped), fresh ``/proc``,
                               minimal ``/dev``
environment                    ``--clearenv``; only ``PATH``, ``HOME=/workspace``, ``LANG``,
                               ``PYTHONDONTWRITEBYTECODE`` and ``PYTHONHASHSEED=0`` are set
identity (host runs as root)   bwrap drops every capability but those the worker needs
                               (:func:`privilege_args`); the worker empties the capability
                               bounding set, the code drops to a per-episode unprivileged
                               uid/gid with no capability left (checked), and the supervisor
                               keeps only ``CAP_KILL``; ``no_new_privs`` is set, so set-uid
                               binaries gain nothing. A host that is not root:
                               ``--unshare-user``, no capability
IPC, hostname                  ``--unshare-ipc``, ``--unshare-uts``
user namespaces                none can be made inside: a seccomp filter (``bwrap --seccomp``,
                               :mod:`agentic_rl.tools.sandbox.seccomp`) fails ``unshare``/``clone``
                               with ``CLONE_NEWUSER`` (``EPERM``) and ``clone3`` (``ENOSYS``)
memory and processes of the    one cgroup per sandbox (:mod:`agentic_rl.tools.sandbox.cgroups`):
whole sandbox                  cgroup v2 where the host delegates ``memory`` and ``pids``
                               (the trainer's processes are moved into a leaf when its own
                               cgroup holds them), else cgroup v1 where ``memory`` is a v1
                               hierarchy this process may write (root): a memory limit of
                               ``memory_bytes`` for all its pages (heap, memfd, files written
                               to ``/tmp`` and the workspace), no swap, an OOM kill reported as
                               ``memory_exceeded`` (v2 kills the whole sandbox, v1 its largest
                               process), ``pids.max = max_processes + 3``
OOM killer's choice            every sandboxed process has ``oom_score_adj`` 1000: when memory
                               runs out, sandboxed code goes before the trainer
a killed trainer               processes, workspace mount, cgroup and directory are registered
                               with the trainer's child-server watchdog
                               (:mod:`agentic_rl.processes`), which removes them when the
                               trainer dies (SIGKILL included); mounts left by a trainer killed
                               with its watchdog are swept by the next process that mounts one
workspace size and file count  where the host can mount (root): the workspace is a tmpfs of
                               ``workspace_bytes`` and ``workspace_inodes`` (``ENOSPC`` beyond),
                               ``nosuid``, ``nodev``; ``/tmp`` is a tmpfs of ``tmp_bytes``
host files during snapshots    the sandbox's processes are stopped while the host copies the
                               workspace, and every path is opened fd-relative without following
                               links (:mod:`agentic_rl.tools.sandbox.freeze`, :mod:`~.snapshot`)
CPU, memory, processes, files  ``setrlimit`` in the worker's kernel process (soft = hard):
                               ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE``,
                               ``RLIMIT_NOFILE``; ``RLIMIT_CPU`` with hard = soft + 1 s, so a
                               CPU-limit kill is a ``SIGXCPU`` (reported, and counted as a
                               ``cpu`` limit hit); ``RLIMIT_CORE`` = 0
wall-clock time, output        the host kills the whole sandbox after ``timeout_s``; stdout
                               and stderr (descriptors 1 and 2 of every sandboxed process)
                               and values are capped at ``max_output_chars`` with a
                               truncation marker, by the worker's supervisor process
results (exit status, output)  the code runs in a child (kernel) of the worker's supervisor;
                               host and supervisor talk over dedicated pipes the program
                               cannot reach (the supervisor is non-dumpable and, on a root
                               host, of another uid); exit status and killing signal come
                               from ``wait4``, not from the program, so printed or written
                               replies forge nothing (:mod:`~agentic_rl.tools.sandbox._sandbox_worker`)
=============================  ==============================================================

=============================  ==============================================================
Not isolated                   Why / mitigation
=============================  ==============================================================
kernel                         shared with the host: a kernel exploit escapes (no VM; the
                               seccomp filter only removes user namespaces)
CPU time across processes      ``RLIMIT_CPU`` is per process; the wall-clock timeout bounds a
                               call
memory across processes, when  ``RLIMIT_AS`` is per process: N processes hold up to N x
the host has no usable cgroup  ``memory_bytes``, and a memfd is not address space once
(not root, and no delegated    unmapped; ``RLIMIT_NPROC`` bounds the count.
cgroup v2)                     ``EpisodeSandbox.limit_problems`` says why;
                               ``require_whole_limits`` (or the run config's
                               ``tools.require_whole_sandbox_limits``) refuses to run so
``RLIMIT_NPROC`` when the      the sandbox runs as the host user, whose other processes count
host is not root               too; the limit is set to (their count + ``max_processes``)
readable system files          everything under ``/usr`` and the Python prefixes is readable,
                               except ``SandboxConfig.hidden_paths`` (empty tmpfs over them)
workspace size, when the host  only ``RLIMIT_FSIZE`` per file: neither the total nor the
cannot mount (not root)        file count is capped (``limit_problems`` says so)
``unsafe_local`` backend       no namespaces, no seccomp filter, no freeze during snapshots
                               (the code runs as the host user, with root's capabilities on a
                               root host); the rlimits, ``oom_score_adj``, the workspace tmpfs
                               and the cgroup apply as for ``bwrap``
=============================  ==============================================================
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "SandboxConfig",
    "SandboxError",
    "SandboxUnavailableError",
    "bwrap_available",
    "sandbox_command",
    "WORKER_PATH",
]

logger = logging.getLogger(__name__)

WORKER_PATH = Path(__file__).with_name("_sandbox_worker.py")
_SANDBOX_WORKER = "/opt/agentic_rl/worker.py"
#: ``oom_score_adj`` of every sandboxed process: the OOM killer's first choice (the maximum)
OOM_SCORE_ADJ = 1000
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives")


class SandboxError(RuntimeError):
    """The sandbox could not start or broke its protocol (an infrastructure failure)."""


class SandboxUnavailableError(SandboxError):
    """bubblewrap is missing or cannot create namespaces on this machine.

    Install it (``apt-get install bubblewrap``), allow user namespaces, or pass
    ``backend="unsafe_local"`` explicitly to run with resource limits only.
    """


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and backend of one episode's sandbox.

    Attributes:
        backend: ``"bwrap"`` (isolated) or ``"unsafe_local"`` (resource limits only).
        timeout_s: wall-clock limit of one interpreter call; the sandbox is killed after it.
        memory_bytes: ``RLIMIT_AS`` of every sandboxed process.
        cpu_seconds: ``RLIMIT_CPU`` of every sandboxed process (over its lifetime).
        max_processes: ``RLIMIT_NPROC`` (processes of the sandbox user).
        max_file_bytes: ``RLIMIT_FSIZE`` (largest file a sandboxed process may write) and the
            largest ``write_file`` content.
        max_open_files: ``RLIMIT_NOFILE``.
        max_output_chars: cap of stdout, stderr and the value repr of one call, each.
        max_read_chars: cap of what ``read_file`` returns.
        tmp_bytes: size of the private ``/tmp`` tmpfs.
        workspace_bytes: size of the workspace tmpfs (total bytes of its files), where the host
            can mount one (see :mod:`agentic_rl.tools.sandbox.limits`).
        workspace_inodes: inode cap of the workspace tmpfs (files, directories and links).
        cgroup_parent: a cgroup v2 directory delegated to this process under which each sandbox
            gets its own cgroup (``memory.max = memory_bytes``, ``pids.max``); None: this
            process's own cgroup (v2), else its v1 ``memory``/``pids`` groups.
        require_whole_limits: refuse to start (:class:`SandboxUnavailableError`) when the host
            allows the workspace tmpfs or the cgroup not, instead of running without them (with
            a warning); also switched on for every sandbox by the environment variable
            ``AGENTIC_RL_REQUIRE_WHOLE_SANDBOX_LIMITS=1``.
        startup_timeout_s: how long the interpreter may take to start.
        python: interpreter to run (default: this process's ``sys.executable``).
        hidden_paths: absolute host directories that the ``bwrap`` backend covers with an
            empty tmpfs inside the sandbox (e.g. an installed package holding a task's answers);
            the ``unsafe_local`` backend hides nothing.

    Raises:
        ValueError: on construction, for an unknown backend, a non-positive limit, or a
            relative hidden path or cgroup parent.
    """

    backend: Literal["bwrap", "unsafe_local"] = "bwrap"
    timeout_s: float = 5.0
    memory_bytes: int = 1 << 30
    cpu_seconds: int = 60
    max_processes: int = 64
    max_file_bytes: int = 16 << 20
    max_open_files: int = 256
    max_output_chars: int = 20_000
    max_read_chars: int = 100_000
    tmp_bytes: int = 64 << 20
    startup_timeout_s: float = 15.0
    python: str = sys.executable
    hidden_paths: tuple[str, ...] = ()
    workspace_bytes: int = 256 << 20
    workspace_inodes: int = 8192
    cgroup_parent: str | None = None
    require_whole_limits: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_paths", tuple(self.hidden_paths))
        for path in self.hidden_paths:
            if not isinstance(path, str) or not os.path.isabs(path):
                raise ValueError(f"SandboxConfig.hidden_paths must be absolute paths, got {path!r}")
        if self.cgroup_parent is not None and not os.path.isabs(self.cgroup_parent):
            raise ValueError(
                f"SandboxConfig.cgroup_parent must be an absolute path, got {self.cgroup_parent!r}"
            )
        if self.backend not in ("bwrap", "unsafe_local"):
            raise ValueError(f"backend must be 'bwrap' or 'unsafe_local', got {self.backend!r}")
        for name in (
            "timeout_s",
            "memory_bytes",
            "cpu_seconds",
            "max_processes",
            "max_file_bytes",
            "max_open_files",
            "max_output_chars",
            "max_read_chars",
            "tmp_bytes",
            "startup_timeout_s",
            "workspace_bytes",
            "workspace_inodes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"SandboxConfig.{name} must be positive, got {getattr(self, name)}"
                )


@functools.lru_cache(maxsize=1)
def _probe_bwrap() -> str | None:
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed; install it with: apt-get install bubblewrap"
    argv = [exe, "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/"]
    if os.geteuid() != 0:
        argv.append("--unshare-user")
    try:
        done = subprocess.run([*argv, "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap failed to run: {exc}"
    if done.returncode != 0:
        return (
            f"bubblewrap cannot create namespaces here (exit {done.returncode}): "
            f"{done.stderr.strip()}; user namespaces may be disabled"
        )
    return None


def bwrap_available() -> bool:
    """True when bubblewrap is installed and can create the sandbox's namespaces. Never raises."""
    return _probe_bwrap() is None


def bwrap_unavailable_reason() -> str | None:
    """Why the sandbox cannot run here (bwrap not installed, or unable to create namespaces, with
    what to do), or None when it can. Probed once per process. Never raises."""
    return _probe_bwrap()


def _own_process_count() -> int:
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += 1
        except OSError:
            continue
    return count


def worker_settings(config: SandboxConfig, uid: int | None, capture: str) -> dict:
    """Settings passed to the worker: limits, user id to drop to, output cap, capture file.

    Never raises.
    """
    nproc = config.max_processes
    if uid is None:  # runs as the host user: its other processes count against the limit
        nproc += _own_process_count()
    limits = {
        "cpu": config.cpu_seconds,
        "as": config.memory_bytes,
        "nproc": nproc,
        "fsize": config.max_file_bytes,
        "nofile": config.max_open_files,
    }
    if uid is None and os.geteuid() == 0:
        limits["nproc"] = None  # not enforced for root anyway; avoid a misleading limit
    return {
        "limits": limits,
        "uid": uid,
        "max_output_chars": config.max_output_chars,
        "capture": capture,
        "oom_score_adj": OOM_SCORE_ADJ,
        "cwd": "/workspace" if config.backend == "bwrap" else None,
    }


def privilege_args(*, kill: bool = False) -> list[str]:
    """The bwrap arguments of the sandbox's identity.

    A root host: bwrap keeps every capability of root unless told otherwise, so all are dropped
    but ``CAP_SETUID``/``CAP_SETGID`` (the worker's switch to the episode's uid, which then drops
    them too), ``CAP_SETPCAP`` (the worker empties the capability bounding set first) and, with
    ``kill``, ``CAP_KILL`` (the ``python`` tool's supervisor, still root, kills its kernel of
    another uid; it keeps only that one). Another host: ``--unshare-user`` (the sandbox runs as
    the host user, with no capability). Never raises.
    """
    if os.geteuid() != 0:
        return ["--unshare-user"]
    keep = ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"] + (["CAP_KILL"] if kill else [])
    return ["--cap-drop", "ALL"] + [arg for cap in keep for arg in ("--cap-add", cap)]


def _mount_dirs(path: str, created: set[str]) -> list[str]:
    """``--perms 0755 --dir`` for each missing ancestor so an unprivileged uid can traverse."""
    args: list[str] = []
    parts = Path(path).parts
    for i in range(2, len(parts)):
        parent = str(Path(*parts[:i]))
        if parent not in created:
            created.add(parent)
            args += ["--perms", "0755", "--dir", parent]
    return args


def _host_mounts(config: SandboxConfig, created: set[str] | None = None) -> list[str]:
    """The bwrap arguments that mount the host's system files read-only (``/usr``, the ``/lib``
    family, a few ``/etc`` files, the Python prefixes), the private ``/tmp`` of
    ``config.tmp_bytes`` bytes, and empty tmpfs over ``config.hidden_paths``, in that order.
    ``created`` (when given) receives the directories made or mounted inside, for more mounts
    through :func:`_mount_dirs`."""
    cmd = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            cmd += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            cmd += ["--ro-bind", str(host), str(host)]
    for name in _ETC_FILES:
        if (Path("/etc") / name).exists():
            cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    # the private /tmp comes before the Python prefixes: a venv that lives under the host's /tmp
    # (a CI checkout, say) is then mounted on top of it instead of being hidden by it
    cmd += ["--perms", "1777", "--size", str(config.tmp_bytes), "--tmpfs", "/tmp"]
    created = {"/usr", "/etc", "/tmp", "/proc", "/dev"} if created is None else created
    created |= {"/usr", "/etc", "/tmp", "/proc", "/dev"}
    prefixes = sorted(
        {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)} | {sys.prefix, sys.base_prefix}
    )
    for prefix in prefixes:
        if not prefix.startswith("/usr/") and os.path.isdir(prefix):
            cmd += _mount_dirs(prefix, created) + ["--ro-bind", prefix, prefix]
    for path in config.hidden_paths:  # after the prefixes, so that it covers what they mount
        if os.path.isdir(path):
            cmd += ["--tmpfs", path]
    return cmd


def sandbox_command(
    config: SandboxConfig, workspace: Path, argv: list[str], seccomp_fd: int | None = None
) -> list[str]:
    """The ``bwrap`` command line that runs ``argv`` in a sandbox around ``workspace``.

    ``argv[0]`` must be the interpreter path (it is visible inside: the Python prefixes are
    mounted at their host paths) and the worker script is mounted read-only at
    ``/opt/agentic_rl/worker.py`` (a ``WORKER_PATH`` item in ``argv`` is rewritten to it).
    Put a per-episode marker in ``argv`` (and the workspace name) so that the episode's
    processes can be found in ``/proc``. ``seccomp_fd`` (from
    :func:`agentic_rl.tools.sandbox.seccomp.filter_fd`, passed to bwrap with ``pass_fds``) loads the
    filter that forbids new user namespaces.

    Raises:
        SandboxUnavailableError: bubblewrap is missing or cannot create namespaces.
    """
    problem = _probe_bwrap()
    if problem:
        raise SandboxUnavailableError(problem)
    cmd = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
    ]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    cmd += privilege_args(kill=True)
    cmd += _host_mounts(config)
    cmd += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--bind",
        str(workspace),
        "/workspace",
        "--chdir",  # the worker enters /workspace as the episode's uid (it is 0700, theirs)
        "/",
        "--ro-bind",
        str(WORKER_PATH),
        _SANDBOX_WORKER,
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/workspace",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--setenv",
        "PYTHONHASHSEED",
        "0",
        "--",
    ]
    return cmd + [argv[0], *[(_SANDBOX_WORKER if a == str(WORKER_PATH) else a) for a in argv[1:]]]


def warn_unsafe_local() -> None:
    """Log the warning that the ``unsafe_local`` backend isolates nothing but resources."""
    logger.warning(
        "sandbox backend 'unsafe_local': code runs as a plain child process with "
        "resource limits only - no network, file system or process isolation"
    )
