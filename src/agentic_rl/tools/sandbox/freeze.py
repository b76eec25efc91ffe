"""Stop every process of a bwrap sandbox while the host copies its workspace, then let them go on.

The host reads and writes an episode's workspace as root (snapshots, restores). While it does,
no process of the sandbox may run: one that swaps a directory for a symbolic link between two
host steps could otherwise make the copy inconsistent (the copy itself never follows a link:
see :mod:`agentic_rl.tools.sandbox.snapshot`). :func:`frozen` sends ``SIGSTOP`` to every process of the
sandbox's PID namespace and waits until they are provably stopped:

* the members are all processes whose ``/proc/PID/ns/pid`` is the namespace of the bwrap
  process's child (its init); a sandboxed process cannot leave its PID namespace;
* a pass reads the state and the context-switch counts of every thread of every member;
  the sandbox is quiescent when two consecutive passes find the same members, every thread
  stopped (``T``/``t``, or blocked in ``vfork`` behind a child that is itself stopped) or dead
  (``Z``/``X``) in both, with unchanged switch counts. A thread
  that ran between its two readings (woken by a ``SIGCONT`` from a sibling, say) would have
  been switched out again, so it changed its count; hence at the end of the first pass every
  thread was stopped at once, and a stopped sandbox cannot wake itself.

:func:`frozen` yields False when the sandbox does not settle within its time limit (a process
that keeps forking and waking its siblings); the caller then kills the sandbox instead.
Processes the code had stopped itself are continued too on thaw (``SIGCONT``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

__all__ = ["descendants", "frozen", "namespace_pids"]

#: ``V``: our mark for a thread blocked in ``vfork`` until its child execs or exits (state ``D``
#: with the kernel wait channel below). It cannot run before its child does, and the child is a
#: member of the same namespace whose own state is checked, so it counts as stopped. (A shell
#: or ``posix_spawn`` that vforks a child we stopped before its ``exec`` sits there for good.)
_STOPPED, _GONE = ("T", "t", "V"), ("Z", "X", "x")
_VFORK_WAIT = ("kernel_clone", "wait_for_vfork_done", "do_fork", "_do_fork")


def _ppid_and_state(pid: str) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[1]), fields[0].decode()
    except (OSError, IndexError, ValueError):
        return None


def _pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _namespace_of(bwrap_pid: int) -> str | None:
    """The PID namespace bwrap created (its child's), None when it has no child in another one."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (_ppid_and_state(entry.name) or (0, ""))[0] == bwrap_pid:
            ns = _pid_namespace(entry.name)
            if ns is not None and ns != _pid_namespace(bwrap_pid):
                return ns
    return None


def _members(namespace: str) -> list[int]:
    return sorted(
        int(e.name)
        for e in os.scandir("/proc")
        if e.name.isdigit() and _pid_namespace(e.name) == namespace
    )


def namespace_pids(bwrap_pid: int) -> list[int]:
    """Host pids of every process in the PID namespace that ``bwrap_pid`` created.

    Empty when bwrap has no child (yet, or any more). Never raises.
    """
    namespace = _namespace_of(bwrap_pid)
    return _members(namespace) if namespace else []


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it in the process tree (from ``/proc``). Never raises."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            info = _ppid_and_state(entry.name)
            if info is not None:
                children.setdefault(info[0], []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


def _thread_states(pid: int) -> dict[str, tuple[str, int]] | None:
    """``{tid: (state, voluntary + involuntary switches)}``; None when the process is gone."""
    states = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        state, switches = "X", 0
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("State:"):
                        state = line.split()[1]
                    elif "ctxt_switches:" in line:
                        switches += int(line.split()[1])
        except (OSError, ValueError):
            pass
        if state == "D" and _wait_channel(pid, tid) in _VFORK_WAIT:
            state = "V"
        states[tid] = (state, switches)
    return states


def _wait_channel(pid: int, tid: str) -> str:
    """The kernel function a thread sleeps in (``/proc/PID/task/TID/wchan``); "" when unknown."""
    try:
        with open(f"/proc/{pid}/task/{tid}/wchan") as f:
            return f.read().strip()
    except OSError:
        return ""


def _snapshot(namespace: str | None) -> dict[int, dict[str, tuple[str, int]] | None]:
    return {pid: _thread_states(pid) for pid in _members(namespace)} if namespace else {}


def _all_stopped(view: dict[int, dict[str, tuple[str, int]] | None]) -> bool:
    return all(
        threads is None or all(s in _STOPPED + _GONE for s, _ in threads.values())
        for threads in view.values()
    )


def _stop(bwrap_pid: int, timeout_s: float) -> tuple[bool, set[int]]:
    """SIGSTOP the namespace until it is provably quiescent; (settled, pids signalled)."""
    signalled: set[int] = set()
    deadline, previous = time.monotonic() + timeout_s, None
    namespace = _namespace_of(bwrap_pid)
    while True:
        view = _snapshot(namespace)
        for pid, threads in view.items():
            # a vfork-blocked thread gets SIGSTOP too: pending, it stops the thread the moment
            # it leaves the kernel, so no thread counted as stopped can run during the copy
            if threads is not None and not all(
                s in ("T", "t") + _GONE for s, _ in threads.values()
            ):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                signalled.add(pid)
        if previous is not None and view == previous and _all_stopped(view):
            return True, signalled | set(view)
        if time.monotonic() > deadline:
            return False, signalled | set(view)
        previous = view if _all_stopped(view) else None
        if previous is None:
            time.sleep(0.001)


@contextlib.contextmanager
def frozen(bwrap_pid: int | None, timeout_s: float = 1.0) -> Iterator[bool]:
    """Keep every process of the sandbox whose bwrap process is ``bwrap_pid`` stopped inside the block.

    Yields True once the sandbox is provably quiescent (see the module docstring), False when it
    did not settle within ``timeout_s`` seconds (the caller must then kill the sandbox). With
    ``bwrap_pid`` None (no sandbox runs) it yields True at once. Every process it stopped gets
    ``SIGCONT`` when the block ends. Never raises by itself.
    """
    if bwrap_pid is None:
        yield True
        return
    settled, stopped = _stop(bwrap_pid, timeout_s)
    try:
        yield settled
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
