"""Limits on a sandbox as a whole: a size- and inode-capped workspace and a cgroup v2 group.

``setrlimit`` bounds each process; a sandbox is many processes. Two kernel mechanisms bound the
whole of one episode's sandbox, each used when the host allows it:

* **Workspace**: :func:`mount_workspace` mounts a tmpfs (``size=``, ``nr_inodes=``, ``nosuid``,
  ``nodev``) on the episode's workspace directory, so files there hold at most
  ``SandboxConfig.workspace_bytes`` bytes and ``workspace_inodes`` inodes (``ENOSPC`` beyond),
  whoever writes them (the sandboxed code or the host's file tools). Needs ``CAP_SYS_ADMIN``
  (a root host); the mount lives until :func:`unmount_workspace` (``EpisodeSandbox.close``).
* **Memory and processes**: :class:`SandboxCgroup` is a child cgroup with ``memory.max`` (every
  page the sandbox's processes use: heap, memfd, tmpfs files they write), ``memory.swap.max =
  0``, ``memory.oom.group = 1`` (an out-of-memory kill takes the whole sandbox) and
  ``pids.max``. It needs a cgroup v2 hierarchy whose controllers are delegated to this process:
  ``memory`` and ``pids`` listed in the ``cgroup.subtree_control`` of
  ``SandboxConfig.cgroup_parent`` (default: the process's own cgroup; enabled there by writing
  it, which the kernel allows only in a cgroup that holds no process, or the root cgroup).
  The sandbox's processes are moved in after the interpreter reports ready, before any user
  code runs; their children inherit it.

:func:`cgroup_problem` and the return of :func:`mount_workspace` say why a mechanism is not
available; the sandbox then runs without it (or refuses to start, with
``SandboxConfig.require_whole_limits``), as its docstring table states.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import time
from pathlib import Path

__all__ = ["SandboxCgroup", "cgroup_problem", "mount_workspace", "unmount_workspace"]

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 0x2, 0x4, 0x2


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_workspace(path: Path, size_bytes: int, inodes: int) -> str | None:
    """Mount a tmpfs of ``size_bytes`` bytes and ``inodes`` inodes on the empty directory ``path``.

    Returns None when mounted, else why not (e.g. not root). Never raises.
    """
    options = f"size={int(size_bytes)},nr_inodes={int(inodes)},mode=0700".encode()
    try:
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


def _own_cgroup() -> Path | None:
    """The cgroup v2 directory of this process, None without a cgroup v2 hierarchy."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    for fields in mounts:
        sep = fields.index("-")
        if fields[sep + 1] == "cgroup2" and fields[3] == "/" and rel is not None:
            return Path(fields[4]) / rel.lstrip("/")
    return None


def _parent(cgroup_parent: str | None) -> Path | None:
    return Path(cgroup_parent) if cgroup_parent else _own_cgroup()


@functools.lru_cache(maxsize=8)
def cgroup_problem(cgroup_parent: str | None = None) -> str | None:
    """None when per-sandbox cgroups with ``memory`` and ``pids`` can be made here, else why not.

    ``cgroup_parent``: the cgroup v2 directory to create them under (default: this process's
    own cgroup). Never raises (the answer is cached for the process's life).
    """
    parent = _parent(cgroup_parent)
    if parent is None:
        return "no cgroup v2 hierarchy is mounted"
    try:
        offered = (parent / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(offered):
            return (
                f"the cgroup v2 hierarchy offers {offered or 'no controllers'} to {parent}, "
                "not memory and pids (a cgroup v1 or hybrid host, or no delegation)"
            )
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
        probe = parent / f"agentic-rl-probe-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cannot create a child cgroup with memory and pids in {parent}: {exc}"
    return None


class SandboxCgroup:
    """One sandbox's cgroup: ``memory.max``, no swap, one OOM group, ``pids.max``.

    Args:
        name: the child cgroup's name (unique per sandbox).
        memory_bytes: ``memory.max``.
        max_pids: ``pids.max``.
        cgroup_parent: the delegated cgroup v2 directory it is made in (default: this process's).

    Raises:
        OSError: the cgroup cannot be created or configured (check :func:`cgroup_problem` first).
    """

    def __init__(
        self, name: str, memory_bytes: int, max_pids: int, cgroup_parent: str | None = None
    ) -> None:
        parent = _parent(cgroup_parent)
        if parent is None:
            raise OSError("no cgroup v2 hierarchy is mounted")
        self.path = parent / name
        self.path.mkdir()
        try:
            (self.path / "memory.max").write_text(str(int(memory_bytes)))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
            (self.path / "memory.oom.group").write_text("1")
            (self.path / "pids.max").write_text(str(int(max_pids)))
        except OSError:
            self.remove()
            raise

    def add(self, pids: list[int]) -> None:
        """Move processes into the group (their future children follow).

        Raises:
            OSError: a process cannot be moved (one that already exited is skipped).
        """
        for pid in pids:
            try:
                (self.path / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                continue

    def events(self) -> dict[str, int]:
        """``memory.events`` counters (``oom_kill``, ``max``, ...); empty if unreadable. Never raises."""
        try:
            return {
                k: int(v)
                for k, v in (
                    line.split() for line in (self.path / "memory.events").read_text().splitlines()
                )
            }
        except (OSError, ValueError):
            return {}

    def remove(self) -> None:
        """Kill what is left in the group and delete it (waits up to 2 s). Never raises."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 2.0
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)
