"""Limits on a sandbox as a whole: a size- and inode-capped workspace and a cgroup.

``setrlimit`` bounds each process; a sandbox is many processes. Two kernel mechanisms bound the
whole of one sandbox (the ``python`` tool's episode sandbox, an MCP server's sandbox), each used
when the host allows it; :class:`WholeLimits` sets both up for one sandbox:

* **Workspace**: :func:`mount_workspace` mounts a tmpfs (``size=``, ``nr_inodes=``, ``nosuid``,
  ``nodev``) on the sandbox's workspace directory, so files there hold at most
  ``SandboxConfig.workspace_bytes`` bytes and ``workspace_inodes`` inodes (``ENOSPC`` beyond),
  whoever writes them (the sandboxed code or the host's file tools). Needs ``CAP_SYS_ADMIN``
  (a root host).
* **Memory and processes**: :class:`~agentic_rl.tools.sandbox.cgroups.SandboxCgroup` (cgroup v2,
  or v1 where the host mounts ``memory`` as v1; the rules and the "no internal processes"
  leaf are in :mod:`agentic_rl.tools.sandbox.cgroups`).

Whatever the host allows, every sandboxed process gets ``oom_score_adj`` =
:data:`OOM_SCORE_ADJ` (the most the kernel takes), so when memory runs out, the OOM killer picks
sandboxed code before the trainer.

Cleanup after a killed owner (the OOM killer sends SIGKILL, which runs no ``finally``): a
:class:`WholeLimits` registers its sandbox's processes, cgroup, mount and directory with the
owner's child-server watchdog (:mod:`agentic_rl.processes`), which unmounts, kills and deletes
them when the owner dies. A private mount namespace that dies with the trainer is not used: a
threaded process cannot ``unshare(CLONE_NEWNS)`` (``EINVAL``), and the host's file tools must
see the mount. Should the watchdog die with its owner (both killed at once), the next process
that mounts a workspace first sweeps the mounts whose owner is gone
(:func:`sweep_stale_workspaces`: each sandbox directory holds an ``.owner`` file with the
owner's pid and start time).

:func:`cgroup_problem` and the return of :func:`mount_workspace` say why a mechanism is not
available; the sandbox then runs without it (a warning, once per reason), or refuses to start
when whole limits are required: ``SandboxConfig.require_whole_limits``, or the environment
variable :data:`REQUIRE_VARIABLE` = ``1`` (set by the run config's
``tools.require_whole_sandbox_limits`` for every sandbox of the run).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import shutil
import tempfile
from pathlib import Path

from agentic_rl.processes import guard
from agentic_rl.tools.sandbox.bwrap import OOM_SCORE_ADJ, SandboxConfig, SandboxUnavailableError
from agentic_rl.tools.sandbox.cgroups import SandboxCgroup, cgroup_placement, cgroup_problem

__all__ = [
    "OOM_SCORE_ADJ",
    "REQUIRE_VARIABLE",
    "SandboxCgroup",
    "WholeLimits",
    "cgroup_problem",
    "host_problems",
    "mount_workspace",
    "require_whole_limits_from_now_on",
    "sweep_stale_workspaces",
    "unmount_workspace",
]

log = logging.getLogger(__name__)

#: environment variable: ``1`` makes every sandbox of this process (and its children) refuse to
#: start without its whole-sandbox limits
REQUIRE_VARIABLE = "AGENTIC_RL_REQUIRE_WHOLE_SANDBOX_LIMITS"
OWNER_FILE = ".owner"
_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 0x2, 0x4, 0x2
_WARNED: set[str] = set()  # whole-sandbox limit problems already logged (once per process)


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _start_time(pid: int) -> str | None:
    """Start time of ``pid`` (clock ticks since boot, ``/proc/PID/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def mount_workspace(path: Path, size_bytes: int, inodes: int) -> str | None:
    """Mount a tmpfs of ``size_bytes`` bytes and ``inodes`` inodes on the empty directory ``path``
    and record this process as its owner (``path.parent / ".owner"``, for
    :func:`sweep_stale_workspaces`). Sweeps stale workspaces once per process first.

    Returns None when mounted, else why not (e.g. not root). Never raises.
    """
    sweep_stale_workspaces()
    options = f"size={int(size_bytes)},nr_inodes={int(inodes)},mode=0700".encode()
    try:
        (path.parent / OWNER_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        rc = _libc().mount(b"tmpfs", str(path).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options)
    except (OSError, AttributeError) as exc:
        return f"mount(2) is not callable here: {exc}"
    if rc != 0:
        return f"cannot mount a tmpfs on the workspace: {os.strerror(ctypes.get_errno())}"
    return None


def unmount_workspace(path: Path) -> None:
    """Detach the workspace tmpfs (its memory is freed once nothing uses it). Never raises."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().umount2(str(path).encode(), _MNT_DETACH)


def _owner_alive(directory: Path) -> bool:
    """Whether the process recorded in ``directory/.owner`` still runs (same pid, same start)."""
    try:
        pid, started = (directory / OWNER_FILE).read_text().split()
    except (OSError, ValueError):
        return True  # not ours, or not readable: leave it alone
    return _start_time(int(pid)) == started


def _cgroup_parents() -> list[Path]:
    """The directories sandbox cgroups are made in by default (none without cgroups)."""
    placement = cgroup_placement()[0]
    if placement is None:
        return []
    return [placement.memory] + ([placement.pids] if placement.pids else [])


@functools.lru_cache(maxsize=1)
def sweep_stale_workspaces() -> list[str]:
    """Unmount and delete the workspace tmpfs mounts of dead owners; kill what still runs in them.

    A stale mount is a tmpfs mounted at ``<dir>/workspace`` where ``<dir>`` is named
    ``agentic-rl-*`` and holds an :data:`OWNER_FILE` whose process is gone. Its processes (found
    by ``<dir>`` in their command line) and its cgroup (named as ``<dir>`` without mkdtemp's
    suffix) go too. Runs once per process (cached). Returns the mount points swept. Never
    raises.
    """
    swept = []
    try:
        with open("/proc/self/mountinfo") as f:
            rows = [line.split() for line in f]
    except OSError:
        return swept
    for fields in rows:
        sep = fields.index("-")
        mount_point = Path(fields[4].replace("\\040", " "))
        directory = mount_point.parent
        if fields[sep + 1] != "tmpfs" or mount_point.name != "workspace":
            continue
        if not directory.name.startswith("agentic-rl-") or _owner_alive(directory):
            continue
        from agentic_rl._watchdog import clean_up

        # bwrap's command line names the directory (its sandbox dies with it); the cgroup is
        # named as the directory, less mkdtemp's suffix
        items = {k: [] for k in ("pgid", "environ", "umount", "rmtree")}
        cgroups = [str(p / directory.name.rsplit("-", 1)[0]) for p in _cgroup_parents()]
        clean_up({**items, "cmdline": [str(directory)], "cgroup": cgroups})
        unmount_workspace(mount_point)
        shutil.rmtree(directory, ignore_errors=True)
        swept.append(str(mount_point))
    if swept:
        log.warning("swept %d workspace mount(s) left by killed processes: %s", len(swept), swept)
    return swept


def host_problems(config: SandboxConfig | None = None) -> list[str]:
    """Why this host cannot bound sandboxes as a whole (empty when it can): a workspace tmpfs is
    mounted and removed on a scratch directory, and the cgroup placement is checked. Never
    raises."""
    config = config or SandboxConfig()
    problems = []
    scratch = Path(tempfile.mkdtemp(prefix="agentic-rl-probe-"))
    try:
        (scratch / "workspace").mkdir()
        problem = mount_workspace(scratch / "workspace", 1 << 20, 16)
        if problem:
            problems.append(f"workspace size and file count cannot be capped: {problem}")
        else:
            unmount_workspace(scratch / "workspace")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    problem = cgroup_problem(config.cgroup_parent)
    if problem:
        problems.append(f"memory and processes cannot be bounded as a whole: {problem}")
    return problems


def require_whole_limits_from_now_on() -> None:
    """Make every sandbox of this process and of the processes it starts refuse to run without
    its whole-sandbox limits (sets :data:`REQUIRE_VARIABLE`), after checking that this host has
    them (what the run config's ``tools.require_whole_sandbox_limits`` does).

    Raises:
        SandboxUnavailableError: the host lacks one (the message says which and why).
    """
    problems = host_problems()
    if problems:
        raise SandboxUnavailableError("; ".join(problems))
    os.environ[REQUIRE_VARIABLE] = "1"


def whole_limits_required(config: SandboxConfig) -> bool:
    """``config.require_whole_limits``, or :data:`REQUIRE_VARIABLE` set to ``1``. Never raises."""
    return config.require_whole_limits or os.environ.get(REQUIRE_VARIABLE, "") == "1"


class WholeLimits:
    """The whole-sandbox limits of one sandbox, and its cleanup should the owner be killed.

    Args:
        directory: the sandbox's private host directory (deleted by :meth:`close`).
        workspace: the workspace directory inside it (the tmpfs goes there).
        name: unique name of the sandbox (its cgroup's name); also a string in the command line
            of its processes (bwrap's, or the worker's), which the watchdog kills by.
        config: the limits (``workspace_bytes``, ``workspace_inodes``, ``memory_bytes``,
            ``max_processes``, ``cgroup_parent``, ``require_whole_limits``).
        environ: an ``NAME=value`` entry of the sandbox processes' environment, killed by too.

    Attributes:
        problems: why a mechanism is missing (empty when both hold).
        cgroup: the sandbox's cgroup, or None.
        mounted: whether the workspace tmpfs is mounted.

    Raises:
        SandboxUnavailableError: whole limits are required (:func:`whole_limits_required`) and
            one is missing (everything made so far is removed first).
    """

    def __init__(
        self,
        directory: Path,
        workspace: Path,
        name: str,
        config: SandboxConfig,
        *,
        environ: str | None = None,
    ) -> None:
        self.directory, self.workspace = directory, workspace
        self.registration = guard().register(cmdline=name, environ=environ, rmtree=directory)
        self.cgroup: SandboxCgroup | None = None
        problems = []
        problem = mount_workspace(workspace, config.workspace_bytes, config.workspace_inodes)
        self.mounted = problem is None
        if self.mounted:
            self.registration.add(umount=workspace)
        else:
            problems.append(f"workspace size and file count are not capped: {problem}")
        problem = cgroup_problem(config.cgroup_parent)
        if problem is None:
            try:
                self.cgroup = SandboxCgroup(
                    name, config.memory_bytes, config.max_processes + 3, config.cgroup_parent
                )
                self.registration.add(cgroup=self.cgroup.paths)
            except OSError as exc:
                problem = f"cannot create the sandbox's cgroup: {exc}"
        if problem:
            problems.append(f"memory and processes are bounded per process only: {problem}")
        self.problems = tuple(problems)
        if problems and whole_limits_required(config):
            self.close()
            raise SandboxUnavailableError("require_whole_limits: " + "; ".join(problems))
        for problem in problems:
            if problem not in _WARNED:
                _WARNED.add(problem)
                log.warning("sandbox: %s (see agentic_rl.tools.sandbox.bwrap)", problem)

    def oom_kills(self) -> int:
        """How many processes the OOM killer took in the cgroup so far (0 without one)."""
        return self.cgroup.events().get("oom_kill", 0) if self.cgroup else 0

    def close(self) -> None:
        """Remove the cgroup (killing what is left in it), unmount the workspace, delete the
        directory, release the watchdog registration. Idempotent; never raises."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.mounted:
            unmount_workspace(self.workspace)
            self.mounted = False
        shutil.rmtree(self.directory, ignore_errors=True)
        self.registration.release()
