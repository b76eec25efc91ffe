"""Run an owner ("trainer") process, SIGKILL it, and check what it started is gone.

Shared by the tests of every child server (tests/test_processes.py, the MCP, OpenEnv, vLLM and
sandbox tests): the owner is a Python child that runs the given code, prints one JSON line of
state and sleeps; SIGKILL runs no ``finally``, no ``atexit`` and no finalizer, as with the OOM
killer.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

#: appended to an owner's code: print the state dict ``state`` and wait to be killed
REPORT = "\nimport json, sys, time\nprint(json.dumps(state), flush=True)\ntime.sleep(600)\n"


def run_and_kill(code: str, *, timeout_s: float = 300.0) -> dict[str, Any]:
    """Run ``code`` (which sets a dict ``state``) in a Python child, read its state line, SIGKILL
    it, reap it, and return the state.

    Raises:
        AssertionError: the owner exited or printed nothing within ``timeout_s``.
    """
    owner = subprocess.Popen(
        [sys.executable, "-c", code + REPORT], stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + timeout_s
        line = ""
        while not line and time.monotonic() < deadline:
            line = owner.stdout.readline()  # type: ignore[union-attr]
            if not line and owner.poll() is not None:
                break
        assert line, f"the owner printed no state (exit status {owner.poll()})"
        return json.loads(line)
    finally:
        owner.kill()
        owner.wait(timeout=30)
        owner.stdout.close()  # type: ignore[union-attr]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def port_open(port: int) -> bool:
    """True while something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``check`` every 50 ms until it is true or ``timeout_s`` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def mounted(path: str) -> bool:
    """True while ``path`` is a mount point in this process's mount namespace."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def env_marked(entry: str) -> list[int]:
    """Pids whose environment holds ``entry`` (``NAME=value``)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if entry.encode() in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
    return found
