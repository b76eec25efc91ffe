"""Child-server watchdog: cleans up after its owner process when the owner goes away, however.

Started by :mod:`agentic_rl.processes` as ``python -I -S _watchdog.py`` (a plain script that
imports only the standard library, so it starts in milliseconds) in a session of its own, with
its stdin a pipe whose only write end the owner holds. The owner writes JSON lines:

* ``{"id": N, "kind": K, "value": V}``: remember an item of registration ``N``; kinds:

  - ``pgid``: SIGKILL process group ``V`` (a server started in a session of its own);
  - ``cmdline``: SIGKILL every process whose command line contains the string ``V``;
  - ``environ``: SIGKILL every process whose environment holds the entry ``V`` (``NAME=value``);
  - ``cgroup``: kill every process of cgroup directory ``V``, then remove the directory;
  - ``umount``: detach the mount at ``V`` (``umount2(MNT_DETACH)``);
  - ``rmtree``: delete the directory ``V``;

* ``{"drop": N}``: the owner cleaned up registration ``N`` itself; forget it.

End of file on stdin (the owner closed the pipe, exited, crashed or was killed with SIGKILL: the
kernel closes the pipe in every case) makes the watchdog act on everything still registered, in
the order of the list above (processes first, then what they held), and exit. Linux only
(``/proc``). Lines it cannot parse are ignored.
"""

import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import sys
import time

_KINDS = ("pgid", "cmdline", "environ", "cgroup", "umount", "rmtree")
_MNT_DETACH = 2


def _matching(cmdline_markers, environ_entries):
    """Pids (never this one) whose command line holds a marker or whose environment an entry."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if cmdline_markers:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read().replace(b"\0", b" ")
                if any(m in cmdline for m in cmdline_markers):
                    found.append(int(entry))
                    continue
            if environ_entries:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    variables = set(fh.read().split(b"\0"))
                if variables & environ_entries:
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _kill_cgroup(path):
    """SIGKILL every process of the cgroup (``cgroup.kill`` where the kernel has it), then rmdir."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as fh:
            fh.write("1")
    except OSError:
        pass
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(path, "cgroup.procs")) as fh:
                _kill(int(p) for p in fh.read().split())
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            time.sleep(0.02)


def clean_up(items):
    """Act on ``{kind: [values]}`` (module docstring). Never raises."""
    for pgid in items["pgid"]:
        try:
            os.killpg(int(pgid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    markers = [str(v).encode() for v in items["cmdline"]]
    entries = {str(v).encode() for v in items["environ"]}
    for _ in range(5):  # again, for children forked while the first round ran
        pids = _matching(markers, entries) if markers or entries else []
        if not pids:
            break
        _kill(pids)
        time.sleep(0.05)
    for path in items["cgroup"]:
        _kill_cgroup(path)
    if items["umount"]:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        for path in items["umount"]:
            libc.umount2(str(path).encode(), _MNT_DETACH)
    for path in items["rmtree"]:
        shutil.rmtree(path, ignore_errors=True)


def main():
    """Read the owner's lines until end of file, then clean up (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the owner's terminal is not ours
    registrations = {}
    for line in sys.stdin:
        try:
            message = json.loads(line)
            if "drop" in message:
                registrations.pop(message["drop"], None)
            elif message["kind"] in _KINDS:
                registrations.setdefault(message["id"], []).append(
                    (message["kind"], message["value"])
                )
        except (ValueError, KeyError, TypeError):
            continue
    items = {kind: [] for kind in _KINDS}
    for entries in registrations.values():
        for kind, value in entries:
            items[kind].append(value)
    clean_up(items)


if __name__ == "__main__":
    main()
