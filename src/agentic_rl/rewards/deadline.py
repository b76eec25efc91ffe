"""A time limit on each call of a reward function, so a verifier that hangs (a test suite, a
proof checker, a judge) fails its trajectory instead of hanging the trainer.

Two ways to run a call, chosen per function (:class:`~agentic_rl.rewards.rubric.RewardFunction`
``thread_safe``):

thread (the default)
    The call runs in a fresh daemon thread; the caller waits up to ``timeout_s``. Past it the
    call is abandoned: :class:`RewardTimeout` is raised and the thread is left to finish on its
    own (Python cannot stop a thread; it is counted and logged). A function that waits on I/O
    or a subprocess (what verifiers do) releases the GIL, so the trainer goes on. Not for a
    function that is not thread-safe: an abandoned call may still run when the next one
    starts. A call that holds the GIL the whole time (a pure-C loop such as a catastrophic
    regular expression) delays the caller until it returns: use the process way for those.
process (``thread_safe=False``)
    The call runs in a child forked from this process (it sees the trajectory and the
    function's state as they are, nothing is pickled but the float it returns), in a session
    of its own; past ``timeout_s`` the child's whole process group is killed (``SIGKILL``),
    so nothing of the call survives. What the function changes in its own state stays in the
    child. Costs a fork per call (milliseconds; more for a large trainer process).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ChildCallError", "RewardTimeout", "abandoned_calls", "call_with_deadline"]

log = logging.getLogger(__name__)

_abandoned = 0
_abandoned_lock = threading.Lock()


class RewardTimeout(Exception):
    """A reward function call ran past its time limit (the message says which and how long)."""


class ChildCallError(Exception):
    """The function raised in its child process (the message: ``<type>: <message>``), or the
    child ended without a result."""


def abandoned_calls() -> int:
    """How many timed-out thread calls this process left running (see the module docstring)."""
    return _abandoned


def call_with_deadline(
    fn: Callable[[Any], Any], arg: Any, timeout_s: float, *, name: str, thread_safe: bool = True
) -> Any:
    """``fn(arg)`` within ``timeout_s`` seconds, in a thread or a forked child (module docstring).

    Returns:
        what ``fn`` returned (in a child: converted to a float there).

    Raises:
        RewardTimeout: the call ran past ``timeout_s``.
        Exception: whatever ``fn`` raised (in a child: :class:`ChildCallError` naming its type
            and message).
    """
    if thread_safe:
        return _in_thread(fn, arg, timeout_s, name)
    return _in_child(fn, arg, timeout_s, name)


def _in_thread(fn: Callable[[Any], Any], arg: Any, timeout_s: float, name: str) -> Any:
    global _abandoned
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(arg)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"reward-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        with _abandoned_lock:
            _abandoned += 1
            count = _abandoned
        log.error(
            "reward function %r ran past %g s: its thread is left running (%d so far in this "
            "process); if it is not thread-safe, set RewardFunction.thread_safe=False",
            name,
            timeout_s,
            count,
        )
        raise RewardTimeout(f"timed out after {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _in_child(fn: Callable[[Any], Any], arg: Any, timeout_s: float, name: str) -> float:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, write one JSON object, leave without cleanup
        try:
            os.close(read_end)
            os.setsid()  # its own process group: killed with whatever it starts
            try:
                out: dict[str, Any] = {"value": float(fn(arg))}
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = {"error": f"{type(exc).__name__}: {exc}"}
            data = json.dumps(out).encode()
            while data:
                data = data[os.write(write_end, data) :]
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        data = _read_until(read_end, time.monotonic() + timeout_s)
    finally:
        os.close(read_end)
        if data is None:
            for kill in (os.killpg, os.kill):  # the group; the child alone before its setsid
                with contextlib.suppress(OSError):
                    kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if data is None:
        raise RewardTimeout(f"timed out after {timeout_s:g} s (its process was killed)")
    try:
        out = json.loads(data)
    except ValueError:
        raise ChildCallError("its process ended without a result") from None
    if "error" in out:
        raise ChildCallError(out["error"])
    return float(out["value"])


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything written to ``fd`` until its end, or None at ``deadline``."""
    data = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return bytes(data)
        data += chunk
