"""A closed standard output (``agentic-rl envs | head``): stop quietly, as Unix tools do.

Python ignores SIGPIPE, so a write to a pipe whose reader has exited raises
:class:`BrokenPipeError` wherever the command happens to print. :func:`agentic_rl.cli.main.main`
catches it once for every command, checks with :func:`stdout_closed` that the broken pipe is
standard output (not a socket or a child's pipe, which stay errors with a traceback), and calls
:func:`quiet_closed_stdout`: standard output is pointed at ``/dev/null`` so that the interpreter's
own flush at exit does not raise again, and the command exits with :data:`EXIT_CLOSED_STDOUT`.
This is the recipe of the Python documentation (``signal`` module, "Note on SIGPIPE"), with the
status a shell reports for a command that SIGPIPE ended (``seq 100000 | head`` leaves 141 in
``PIPESTATUS``) in place of its 1.
"""

from __future__ import annotations

import os
import select
import signal
import sys

__all__ = ["EXIT_CLOSED_STDOUT", "quiet_closed_stdout", "stdout_closed"]

#: exit status after the reader of standard output went away: 128 + SIGPIPE, as for ``seq | head``
EXIT_CLOSED_STDOUT = 128 + signal.SIGPIPE


def stdout_closed() -> bool:
    """True when standard output is a pipe (or socket) whose reading end is closed: ``poll``
    reports ``POLLERR`` on it. False for a terminal, a file, or a stream without a descriptor
    (pytest's capture). Never raises."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def quiet_closed_stdout() -> int:
    """Point standard output at ``/dev/null`` (what is still buffered is dropped there, and the
    flush at exit succeeds); returns :data:`EXIT_CLOSED_STDOUT`. Never raises."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass
    return EXIT_CLOSED_STDOUT
