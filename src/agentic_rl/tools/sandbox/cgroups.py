"""One cgroup per sandbox: the memory and the process count of a whole sandbox, bounded.

``setrlimit`` bounds each process; a sandbox is many processes, and a memfd or a tmpfs file is
memory that no address-space limit sees. A cgroup bounds every page its processes use (heap,
memfd, tmpfs files they write) and their number. :func:`cgroup_problem` finds where this process
may make one, in this order:

1. **cgroup v2**, under ``SandboxConfig.cgroup_parent`` or, by default, this process's own
   cgroup: it must offer the ``memory`` and ``pids`` controllers (a delegated subtree, or a
   root host) and enable them for its children (``cgroup.subtree_control``). The kernel allows
   that only in a cgroup that holds no process ("no internal processes" rule), and the
   trainer's own cgroup (a systemd scope, a container) holds the trainer. So, when enabling is
   refused with ``EBUSY``, the standard delegation pattern is applied once: a leaf
   ``agentic-rl-processes`` is made in that cgroup, every process of the cgroup is moved into
   it (the trainer, and whatever else shared its cgroup: they stay under the same parent, so
   the limits above them still apply), and the controllers are enabled; sandbox cgroups are
   then siblings of the leaf. A process that finds itself in such a leaf (a worker the trainer
   started later) uses the leaf's parent. Per sandbox: ``memory.max``, ``memory.swap.max = 0``,
   ``memory.oom.group = 1`` (an out-of-memory kill takes the whole sandbox), ``pids.max``.
2. **cgroup v1** (a host whose ``memory`` controller is mounted as v1, as on hybrid hosts and
   older container hosts), where this process may create child groups (root): a child of its
   own ``memory`` cgroup with ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``,
   the same: no swap) and, when the ``pids`` controller is mounted too, a child of its ``pids``
   cgroup with ``pids.max``. v1 has no group kill: the OOM killer kills the sandbox's largest
   process, not all of them.

Otherwise the sandbox runs with per-process limits only (or refuses to start, with
``SandboxConfig.require_whole_limits``); :func:`cgroup_problem` says why.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LEAF", "SandboxCgroup", "cgroup_placement", "cgroup_problem"]

#: the leaf cgroup the trainer's processes are moved into (cgroup v2, see the module docstring)
LEAF = "agentic-rl-processes"
_NEEDED = frozenset({"memory", "pids"})


@dataclass(frozen=True)
class Placement:
    """Where sandbox cgroups are made: ``kind`` ``"v2"`` (``memory`` = the parent holding
    both controllers, ``pids`` None) or ``"v1"`` (one parent per hierarchy, ``pids`` None
    when the v1 ``pids`` controller is not mounted)."""

    kind: str
    memory: Path
    pids: Path | None = None


def _own_paths() -> tuple[dict[str, str], list[list[str]]]:
    """``({controller or "": path in its hierarchy}, mountinfo rows)`` of this process."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                own[name] = path
    with open("/proc/self/mountinfo") as f:
        return own, [line.split() for line in f]


def _mounted_dir(own: dict[str, str], rows: list[list[str]], controller: str) -> Path | None:
    """This process's cgroup directory in the hierarchy of ``controller`` (``""``: v2)."""
    if controller not in own:
        return None
    for fields in rows:
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        if (controller == "" and fstype == "cgroup2") or (
            controller and fstype == "cgroup" and controller in options
        ):
            root, rel = fields[3], own[controller]
            if root != "/" and (rel == root or rel.startswith(root + "/")):
                rel = rel[len(root) :]
            return Path(fields[4]) / rel.lstrip("/")
    return None


def _enable_v2(parent: Path, needed: frozenset[str] = _NEEDED) -> None:
    """Enable the ``needed`` controllers (``memory`` and ``pids``) for ``parent``'s children,
    moving its processes into the leaf first when the kernel refuses because it holds some
    (module docstring).

    Raises:
        OSError: they cannot be enabled.
    """
    control = parent / "cgroup.subtree_control"
    if needed <= set(control.read_text().split()):
        return
    enable = " ".join(f"+{c}" for c in sorted(needed))
    try:
        control.write_text(enable)
        return
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
    leaf = parent / LEAF
    leaf.mkdir(exist_ok=True)
    for _ in range(3):  # processes may start while they are moved
        pids = (parent / "cgroup.procs").read_text().split()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                (leaf / "cgroup.procs").write_text(pid)
    control.write_text(enable)


def _v2_placement(cgroup_parent: str | None) -> Placement:
    """The cgroup v2 parent of sandbox cgroups, controllers enabled.

    Raises:
        OSError: with the reason, when there is none.
    """
    if cgroup_parent:
        parent = Path(cgroup_parent)
    else:
        own, rows = _own_paths()
        found = _mounted_dir(own, rows, "")
        if found is None:
            raise OSError("no cgroup v2 hierarchy is mounted")
        parent = found.parent if found.name == LEAF else found
    offered = (parent / "cgroup.controllers").read_text().split()
    if not _NEEDED <= set(offered):
        raise OSError(
            f"the cgroup v2 hierarchy offers {offered or 'no controllers'} to {parent}, "
            "not memory and pids (a cgroup v1 or hybrid host, or no delegation)"
        )
    _enable_v2(parent)
    return Placement("v2", parent)


def _probe(parent: Path) -> None:
    probe = parent / f"agentic-rl-probe-{os.getpid()}"
    probe.mkdir()
    probe.rmdir()


def _v1_placement() -> Placement:
    """The cgroup v1 parents (memory, and pids where mounted) of sandbox cgroups.

    Raises:
        OSError: with the reason, when there are none.
    """
    own, rows = _own_paths()
    memory = _mounted_dir(own, rows, "memory")
    if memory is None or not (memory / "cgroup.procs").exists():
        raise OSError("no cgroup v1 memory controller is mounted")
    try:
        _probe(memory)
    except OSError as exc:
        raise OSError(f"cannot create a cgroup v1 memory group in {memory}: {exc}") from None
    pids = _mounted_dir(own, rows, "pids")
    if pids is not None:
        try:
            _probe(pids)
        except OSError:
            pids = None
    return Placement("v1", memory, pids)


@functools.lru_cache(maxsize=8)
def cgroup_placement(cgroup_parent: str | None = None) -> tuple[Placement | None, str | None]:
    """``(placement, None)`` where sandbox cgroups can be made here, else ``(None, why not)``.

    ``cgroup_parent``: a delegated cgroup v2 directory to use (then v1 is not tried). May move
    this process's cgroup's processes into a leaf (module docstring). The answer is cached for
    the process's life. Never raises.
    """
    try:
        placement = _v2_placement(cgroup_parent)
        _probe(placement.memory)
        return placement, None
    except OSError as exc:
        v2_problem = str(exc) if "cgroup v2" in str(exc) else f"cgroup v2: {exc}"
    if cgroup_parent:
        return (
            None,
            f"cannot create a child cgroup with memory and pids in {cgroup_parent}: {v2_problem}",
        )
    try:
        return _v1_placement(), None
    except OSError as exc:
        return None, f"{v2_problem}; {exc}"


def cgroup_problem(cgroup_parent: str | None = None) -> str | None:
    """None when per-sandbox cgroups (memory and processes) can be made here, else why not.

    See :func:`cgroup_placement`. Never raises.
    """
    return cgroup_placement(cgroup_parent)[1]


class SandboxCgroup:
    """One sandbox's cgroup (v2: one directory; v1: one per hierarchy), see the module docstring.

    Args:
        name: the child cgroup's name (unique per sandbox).
        memory_bytes: the memory limit of all its processes together.
        max_pids: the most processes it may hold at once.
        cgroup_parent: a delegated cgroup v2 directory to make it in (default: found by
            :func:`cgroup_placement`).

    Attributes:
        kind: ``"v2"`` or ``"v1"``.
        paths: its directories; ``path`` is the first (the memory one).

    Raises:
        OSError: the cgroup cannot be created or configured (check :func:`cgroup_problem` first).
    """

    def __init__(
        self, name: str, memory_bytes: int, max_pids: int, cgroup_parent: str | None = None
    ) -> None:
        placement, problem = cgroup_placement(cgroup_parent)
        if placement is None:
            raise OSError(problem)
        self.kind = placement.kind
        self.path = placement.memory / name
        self.paths = [self.path] + ([placement.pids / name] if placement.pids else [])
        made: list[Path] = []
        try:
            for path in self.paths:
                path.mkdir()
                made.append(path)
            self._configure(int(memory_bytes), int(max_pids))
        except OSError:
            self.paths = made
            self.remove()
            raise

    def _configure(self, memory_bytes: int, max_pids: int) -> None:
        if self.kind == "v2":
            (self.path / "memory.max").write_text(str(memory_bytes))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
            (self.path / "memory.oom.group").write_text("1")
            (self.path / "pids.max").write_text(str(max_pids))
            return
        (self.path / "memory.limit_in_bytes").write_text(str(memory_bytes))
        if (self.path / "memory.memsw.limit_in_bytes").exists():
            (self.path / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        if len(self.paths) > 1:
            (self.paths[1] / "pids.max").write_text(str(max_pids))

    @property
    def procs_files(self) -> list[Path]:
        """The ``cgroup.procs`` files a process joins by writing its pid into each."""
        return [path / "cgroup.procs" for path in self.paths]

    def add(self, pids: list[int]) -> None:
        """Move processes into the group (their future children follow).

        Raises:
            OSError: a process cannot be moved (one that already exited is skipped).
        """
        for pid in pids:
            for procs in self.procs_files:
                try:
                    procs.write_text(str(pid))
                except ProcessLookupError:
                    break

    def events(self) -> dict[str, int]:
        """Memory event counters (``oom_kill``, ...); empty if unreadable. Never raises.

        v2: ``memory.events``; v1: the counters of ``memory.oom_control``."""
        name = "memory.events" if self.kind == "v2" else "memory.oom_control"
        try:
            rows = (line.split() for line in (self.path / name).read_text().splitlines())
            return {k: int(v) for k, v in rows}
        except (OSError, ValueError):
            return {}

    def remove(self) -> None:
        """Kill what is left in the group and delete it (waits up to 2 s). Never raises."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 2.0
        for path in self.paths:
            while True:
                try:
                    for pid in (path / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError):
                            os.kill(int(pid), signal.SIGKILL)
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
