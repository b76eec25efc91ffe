"""``agentic-rl doctor``: the real command, its verdicts against the features' own probes, and a
machine where the sandbox, the browser and Coq are missing (a PATH without them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentic_rl.cli import doctor
from agentic_rl.envs.coq_proof.prover import coq_problem
from agentic_rl.tools.browser.launch import BrowserUnavailableError, find_browser
from agentic_rl.tools.mcp import mcp_unavailable_reason
from agentic_rl.tools.sandbox.bwrap import bwrap_unavailable_reason

REPO = Path(__file__).resolve().parents[1]
NAMES = ["accelerator", "sandbox", "browser", "coq", "mcp", "vllm", "verifiers", "disk"]


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agentic_rl.cli", "doctor", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _browser_found() -> bool:
    try:
        find_browser()
    except BrowserUnavailableError:
        return False
    return True


def test_the_verdicts_are_the_features_own_probes():
    run = _doctor("--json")
    assert run.returncode == 0, run.stderr
    checks = {c["name"]: c for c in json.loads(run.stdout)}
    assert list(checks) == NAMES
    assert checks["sandbox"]["ok"] == (bwrap_unavailable_reason() is None)
    assert checks["browser"]["ok"] == _browser_found()
    assert checks["coq"]["ok"] == (coq_problem() is None)
    assert checks["mcp"]["ok"] == (mcp_unavailable_reason() is None)
    assert all(c["detail"] and c["enables"] for c in checks.values())
    assert "GiB free at" in checks["disk"]["detail"]


def test_a_machine_without_bwrap_chromium_and_coq_is_told_what_to_install():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIC_RL_CHROM")}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's own bin: no bwrap, chromium, coqtop
    run = _doctor(env=env)
    assert run.returncode == 0, run.stderr  # without --strict a missing part is information
    lines = {line.split()[1]: line for line in run.stdout.splitlines() if not line.startswith(" ")}
    assert set(lines) == set(NAMES), run.stdout
    for name, install in (
        ("sandbox", "bwrap"),
        ("browser", "chromium"),
        ("coq", "apt-get install coq"),
    ):
        assert lines[name].startswith("missing"), run.stdout
        assert install in lines[name], lines[name]
    assert "needed by: coq-proof-v0" in run.stdout
    strict = _doctor("--strict", env=env)
    verdicts = [line.split()[:2] for line in strict.stdout.splitlines() if not line.startswith(" ")]
    assert strict.returncode == 1 and verdicts == [line.split()[:2] for line in lines.values()]


def test_a_disk_under_the_floor_fails_its_check(tmp_path, monkeypatch):
    (disk,) = [c for c in doctor.run_checks(tmp_path) if c.name == "disk"]
    assert disk.ok and str(tmp_path.resolve()) in disk.detail
    monkeypatch.setattr(doctor, "MIN_FREE_GIB", float("inf"))
    (disk,) = [c for c in doctor.run_checks(tmp_path) if c.name == "disk"]
    assert not disk.ok and "may not fit" in disk.detail


def test_a_run_directory_not_made_yet_is_checked_on_its_disk(tmp_path):
    (disk,) = [c for c in doctor.run_checks(tmp_path / "runs" / "new") if c.name == "disk"]
    assert disk.ok and f"free at {tmp_path.resolve()}" in disk.detail, disk.detail
