"""Helpers of the browser tests: wait for a browser's processes to go, and kill an owner process
to check that nothing it started outlives it (tests/envs/test_miniwob.py,
tests/tools/test_browser_pool.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from agentic_rl.tools.browser import live_pids


def wait_gone(pgid: int, marker: str, timeout: float = 10.0) -> list[int]:
    """Poll until no live process is in ``pgid`` or names ``marker``; return what is left."""
    deadline = time.monotonic() + timeout
    while (left := live_pids(pgid, marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def assert_nothing_left_after_sigkill(owner_code: str) -> None:
    """Run ``owner_code`` in a Python child; it starts a browser and prints one JSON line
    ``{"pgid", "profile", "pids"}`` and sleeps. SIGKILL it (no finally, no atexit, no
    ``__del__`` runs) and assert that the browser's processes and profile folder are gone."""
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    try:
        state = json.loads(owner.stdout.readline())
        assert len(state["pids"]) >= 2  # chromedriver and chromium at least
        owner.kill()
        owner.wait(timeout=10)
        assert wait_gone(state["pgid"], state["profile"]) == []
        deadline = time.monotonic() + 5
        while os.path.exists(state["profile"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(state["profile"])
    finally:
        if owner.poll() is None:
            owner.kill()
