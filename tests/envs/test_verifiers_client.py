"""The verifiers bridge's protocol guards, against a stand-in bridge that breaks them on purpose
(tests/envs/fake_verifiers_bridge.py; runs without verifiers). Issue 39, item 20.

Every fault (no answer before the deadline, a malformed, non-object, over-long or second line, an
answer with another id, an exit) raises VerifiersError naming it, kills the bridge's process
group, and the next request starts a fresh bridge. The real bridge with real tasksets (a scorer
that hangs, one that writes to descriptor 1) is tested in test_verifiers_adapter.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from agentic_rl.envs.adapters.verifiers_client import VerifiersBridge, VerifiersError

FAKE = Path(__file__).with_name("fake_verifiers_bridge.py")


@pytest.fixture
def bridge(tmp_path, monkeypatch):
    python = (
        tmp_path / "python"
    )  # the "interpreter" the adapter runs: the fake, whatever it is given
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    python.chmod(0o755)
    mode = tmp_path / "mode"
    mode.write_text("ok")
    monkeypatch.setenv("FAKE_BRIDGE_MODE_FILE", str(mode))
    made = VerifiersBridge("fake", python)
    made.mode = mode  # type: ignore[attr-defined]
    yield made
    made.close()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("malformed", "malformed answer"),
        ("not_object", "not a JSON object"),
        ("huge", "answer line over 16777216 bytes"),
        ("wrong_id", "has id 4, not 3 (out of step)"),
        ("two_lines", "more than one line"),
        ("exit", "exited (exit code 3)"),
        ("hang", "no answer before the deadline"),
    ],
)
def test_a_fault_is_a_verifiers_error_and_the_bridge_restarts(bridge, mode, why):
    first = bridge.request({"op": "task", "seed": 0})["pid"]
    bridge.mode.write_text(mode)
    started = time.monotonic()
    with pytest.raises(VerifiersError, match="killed and restarts") as caught:
        bridge.request({"op": "task", "seed": 0}, timeout_s=1.0)
    assert why in str(caught.value) and time.monotonic() - started < 5
    if mode == "exit":
        assert "the fake bridge exits" in str(caught.value)  # the bridge's log is quoted
    assert bridge.process is None and bridge.restarts == 1 and _gone(first)
    bridge.mode.write_text("ok")
    assert bridge.request({"op": "task", "seed": 0})["pid"] != first  # a fresh bridge


def test_stdout_of_the_bridge_goes_to_its_log_not_the_protocol(bridge):
    bridge.mode.write_text("stdout")
    answer = bridge.request({"op": "task", "seed": 0})
    assert "forged" not in answer and bridge.restarts == 0
    assert '"forged": true' in bridge.stderr_tail()
    assert bridge.request({"op": "task", "seed": 1})["id"] == 3  # still in step
