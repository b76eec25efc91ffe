"""Browser watchdog: kills a browser's processes when its owner goes away, however it goes.

Run as ``python _watchdog.py`` (a plain script: it imports nothing from agentic_rl, so it starts
in milliseconds) with its stdin a pipe whose only write end the owning process holds. The owner
writes lines:

* ``pgid N``: kill process group ``N`` (chromedriver started in its own session, and the
  Chromium processes it spawns) at the end;
* ``dir PATH``: kill every process whose command line contains ``PATH`` (the browser's own
  temporary profile folder: catches a process that left the group), then delete ``PATH``;
* ``forget``: the owner cleaned up itself; exit without doing anything.

End of file on stdin (the owner closed the pipe, exited, crashed or was killed with SIGKILL: the
kernel closes the pipe in every case) makes the watchdog send SIGKILL to everything it was told
about, delete the folders, and exit. Linux only (``/proc``).
"""

import os
import shutil
import signal
import sys


def _kill_matching(marker: str) -> None:
    """SIGKILL every process whose command line contains ``marker`` (never this one)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def main() -> None:
    """Read the owner's lines until end of file, then clean up (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the owner's terminal is not ours
    groups, folders = [], []
    for line in sys.stdin:
        kind, _, value = line.strip().partition(" ")
        if kind == "pgid":
            groups.append(int(value))
        elif kind == "dir":
            folders.append(value)
        elif kind == "forget":
            return
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for folder in folders:
        _kill_matching(folder)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
