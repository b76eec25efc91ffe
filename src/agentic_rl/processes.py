"""Child servers that never outlive their owner, however it ends: :func:`guard`, :func:`spawn_guarded`.

The trainer starts servers as child processes: the OpenEnv uvicorn, the vLLM server group, MCP
servers in bubblewrap, chromedriver and Chromium, the sandboxes' workspace mounts and cgroups.
Its own ``close``/``stop``/``finally`` code stops them, but the OOM killer (and ``kill -9``)
sends SIGKILL, which runs none of that. One mechanism covers every such child:

* **a watchdog per owner process** (:mod:`agentic_rl._watchdog`, a standard-library script in a
  session of its own, started on first use) holds the read end of a pipe whose only write end
  the owner holds. The kernel closes that pipe when the owner dies, by any means; the watchdog
  then kills and removes everything still registered with it, and exits;
* **registrations** (:meth:`ChildGuard.register`, one per server) name what to clean up:
  process groups, processes by a command-line marker or an environment entry (which catch
  grandchildren that left the group, such as bwrap's sandbox or Chromium's crash handler),
  cgroups, mounts and directories. The owner releases a registration once it stopped that
  server itself (:meth:`Registration.release`), so a long run does not pile them up;
* :func:`spawn_guarded` starts a server in a session of its own with a fresh marker entry in its
  environment, registered *before* the process exists and its group right after, so no instant
  is left in which a SIGKILLed owner leaks it.

``PR_SET_PDEATHSIG`` is not the mechanism here: it fires when the *thread* that forked the child
exits (a server started from a worker thread would die with that thread), reaches only direct
children, and setting it from Python needs ``preexec_fn``, which is unsafe in a threaded process.
Code that runs inside a child anyway sets it there (the sandbox's worker, bwrap's
``--die-with-parent``) as a second line.

A forked child (``multiprocessing``'s fork start method, Ray's workers) closes the inherited
write end at once (``os.register_at_fork``), so the watchdog sees its real owner die; the child
gets a watchdog of its own on first use. If the watchdog itself dies, the next registration
starts a new one and re-sends what is still registered. Layer rule: standard library only, so
every layer may use it. Linux only (``/proc``).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "MARKER_VARIABLE",
    "ChildGuard",
    "Registration",
    "guard",
    "marked_environment",
    "spawn_guarded",
]

log = logging.getLogger(__name__)

WATCHDOG_PATH = Path(__file__).with_name("_watchdog.py")
#: environment variable that :func:`spawn_guarded` sets to a fresh token in every server it starts
MARKER_VARIABLE = "AGENTIC_RL_CHILD"
_KINDS = ("pgid", "cmdline", "environ", "cgroup", "umount", "rmtree")


class Registration:
    """What the watchdog cleans up for one server if the owner dies (see the module docstring).

    Made by :meth:`ChildGuard.register`; :meth:`add` names more items (a process group known only
    once the process exists), :meth:`release` forgets them all once the owner cleaned up.
    """

    def __init__(self, owner: ChildGuard, ident: int) -> None:
        self._owner, self.ident, self.released = owner, ident, False

    def add(self, **items: Any) -> Registration:
        """Add items: ``pgid`` (int), ``cmdline`` / ``environ`` (str), ``cgroup`` / ``umount`` /
        ``rmtree`` (path); each a single value or a sequence of them. Returns self.

        Raises:
            ValueError: an unknown kind.
        """
        for kind, values in items.items():
            if kind not in _KINDS:
                raise ValueError(f"unknown watchdog item {kind!r} (known: {', '.join(_KINDS)})")
            if values is None:
                continue
            many = isinstance(values, Sequence) and not isinstance(values, (str, bytes))
            for value in values if many else [values]:
                self._owner._add(self, kind, value if kind == "pgid" else str(value))
        return self

    def release(self) -> None:
        """The owner stopped this server itself: forget its items. Idempotent; never raises."""
        if not self.released:
            self.released = True
            self._owner._drop(self)


class ChildGuard:
    """The owner side of one watchdog process (use the process's own: :func:`guard`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None  # the write end of the watchdog's stdin
        self._live: dict[int, list[tuple[str, Any]]] = {}
        self._warned = False

    def register(self, **items: Any) -> Registration:
        """A new registration holding ``items`` (see :meth:`Registration.add`). Never raises for
        a watchdog that cannot start (logged once; the owner's own cleanup still runs)."""
        with self._lock:
            registration = Registration(self, next(self._ids))
            self._live[registration.ident] = []
        return registration.add(**items)

    def _add(self, registration: Registration, kind: str, value: Any) -> None:
        with self._lock:
            if registration.released or registration.ident not in self._live:
                return
            self._live[registration.ident].append((kind, value))
            self._send({"id": registration.ident, "kind": kind, "value": value})

    def _drop(self, registration: Registration) -> None:
        with self._lock:
            if self._live.pop(registration.ident, None) is not None:
                self._send({"drop": registration.ident})

    def _send(self, message: dict[str, Any]) -> None:
        """Write one line; (re)start the watchdog (which then gets every live item) when it is
        not running or its pipe broke."""
        if self._proc is None or self._fd is None or self._proc.poll() is not None:
            self._start()
            return
        try:
            _write_all(self._fd, (json.dumps(message) + "\n").encode())
        except OSError:
            self._start()

    def _start(self) -> None:
        """Start the watchdog and send it every live item (logged once when it cannot start)."""
        self._proc = None
        self._close_pipe()
        read_end, write_end = os.pipe()  # both close on exec: only the watchdog gets read_end
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(WATCHDOG_PATH)],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(write_end)
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot start the child-server watchdog (%s): servers may outlive "
                    "a killed trainer",
                    exc,
                )
            return
        finally:
            os.close(read_end)
        self._proc, self._fd = proc, write_end
        lines = [
            json.dumps({"id": ident, "kind": kind, "value": value}) + "\n"
            for ident, entries in self._live.items()
            for kind, value in entries
        ]
        try:
            _write_all(write_end, "".join(lines).encode())
        except OSError:  # it died at once; the next registration tries again
            self._proc = None
            self._close_pipe()

    def _close_pipe(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def watchdog_pid(self) -> int | None:
        """Pid of the running watchdog, None before the first registration. Never raises."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _after_fork_in_child(self) -> None:
        """In a forked child: let go of the parent's watchdog (its pipe must close with the
        parent) and start afresh."""
        self._proc = None
        self._close_pipe()
        self._lock = threading.Lock()
        self._live = {}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_GUARD = ChildGuard()
os.register_at_fork(after_in_child=_GUARD._after_fork_in_child)


def guard() -> ChildGuard:
    """This process's :class:`ChildGuard` (one watchdog per process). Never raises."""
    return _GUARD


def marked_environment(env: Mapping[str, str] | None = None) -> tuple[dict[str, str], str]:
    """A copy of ``env`` (default ``os.environ``) with ``MARKER_VARIABLE`` set to a fresh token,
    and the ``NAME=token`` entry to register as ``environ``. Never raises."""
    entry = f"{MARKER_VARIABLE}={secrets.token_hex(8)}"
    name, _, value = entry.partition("=")
    return {**(os.environ if env is None else env), name: value}, entry


def spawn_guarded(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, **popen_kwargs: Any
) -> tuple[subprocess.Popen[Any], Registration]:
    """Start ``argv`` in a session of its own (its pid is its process group) under this process's
    watchdog: a fresh environment marker is registered before it starts, its group right after.

    Args:
        argv: the command.
        env: its environment (default: this process's), to which the marker is added.
        popen_kwargs: more :class:`subprocess.Popen` arguments (not ``start_new_session``).

    Returns:
        The process and its registration: call ``registration.release()`` after stopping it.

    Raises:
        OSError: the process cannot be started (its registration is released).
    """
    env, entry = marked_environment(env)
    registration = guard().register(environ=entry)
    try:
        proc = subprocess.Popen(list(argv), env=env, start_new_session=True, **popen_kwargs)
    except BaseException:
        registration.release()
        raise
    registration.add(pgid=proc.pid)
    return proc, registration
