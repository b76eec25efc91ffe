"""The skip summary that ends every pytest run (tests/skip_summary.py), on a real pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests import skip_summary

REPO = Path(__file__).resolve().parents[1]

SKIPPING = """
import pytest

@pytest.mark.skipif(True, reason="bubblewrap missing")
def test_marked():
    pass

def test_inline():
    pytest.skip("bubblewrap missing")

def test_other():
    pytest.skip("the 'web' extra is not installed")

def test_runs():
    assert True
"""

MODULE_SKIP = """
import pytest

pytest.importorskip("no_such_module_for_the_skip_summary")

def test_never():
    pass
"""


def _pytest(directory: Path) -> str:
    """Run pytest with only the summary plugin on ``directory``; stdout and stderr together."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.skip_summary",
            "-p",
            "no:cacheprovider",
        ],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stdout + proc.stderr


def test_skips_are_grouped_by_reason_with_counts(tmp_path):
    (tmp_path / "test_skipping.py").write_text(textwrap.dedent(SKIPPING))
    (tmp_path / "test_module_skip.py").write_text(textwrap.dedent(MODULE_SKIP))
    out = _pytest(tmp_path)
    assert "1 passed, 4 skipped" in out, out
    summary = out[out.index("skipped tests by reason (4)") :]
    lines = [line.strip() for line in summary.splitlines()[1:4]]
    # most frequent first, then by reason; the collect-time module skip counts once
    assert lines[0] == "2  bubblewrap missing", summary
    assert lines[1].startswith("1  could not import 'no_such_module_for_the_skip_summary'"), summary
    assert lines[2] == "1  the 'web' extra is not installed", summary
    assert skip_summary.INSTALL_HINT in summary


def test_a_run_without_skips_says_so(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_ok():\n    assert True\n")
    out = _pytest(tmp_path)
    assert "1 passed" in out, out
    assert "skipped tests by reason: none skipped" in out, out


def test_the_suite_runs_the_summary_and_reports_free_disk():
    # the suite's own conftest carries the hook, so `make test` and any pytest run here end with the
    # skip summary and the free disk (a CI run that fills the disk says so in its last lines)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_config.py::test_file_values",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "skipped tests by reason: none skipped" in run.stdout, run.stdout
    assert "free disk at the temp dir: " in run.stdout and " GiB at the end" in run.stdout, (
        run.stdout
    )
