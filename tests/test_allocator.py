"""The trainer process's allocator (agentic_rl.allocator): mimalloc preloaded in real child
processes, the re-exec of a running command, the off switch, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agentic_rl import allocator
from agentic_rl.allocator import ENV_SWITCH, active_allocator, allocator_env, mimalloc_path
from agentic_rl.tools.browser.launch import browser_environment
from tests.recipe_settings import SIMPLE_SAMPLING

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux-only"
)

REPORT = (
    "import os, torch; from agentic_rl.allocator import active_allocator; "
    "x = torch.ones(4096, 4096); assert float((x @ x)[0, 0]) == 4096.0; "
    "print(active_allocator(), os.environ.get('MIMALLOC_PURGE_DELAY'))"
)
REEXEC = (
    "from agentic_rl.allocator import reexec_with_allocator; reexec_with_allocator(); " + REPORT
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (ENV_SWITCH, "LD_PRELOAD", "MIMALLOC_PURGE_DELAY")
    }
    return {**env, **extra}


def _run(code: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_library_ships_with_the_package():
    assert mimalloc_path() is not None  # cmeel-mimalloc is a dependency on Linux


def test_child_started_with_allocator_env_runs_under_mimalloc():
    env = allocator_env(_clean_env())
    assert env["LD_PRELOAD"].split(":")[0] == str(mimalloc_path())
    assert _run(REPORT, env) == "mimalloc -1"
    assert _run(REPORT, _clean_env()) == "system None"


def test_running_command_reexecutes_itself_once_under_mimalloc():
    assert _run(REEXEC, _clean_env()) == "mimalloc -1"
    assert (
        _run(REEXEC, _clean_env(MIMALLOC_PURGE_DELAY="50")) == "mimalloc 50"
    )  # the user's setting wins


def test_switch_system_keeps_glibc():
    assert _run(REEXEC, _clean_env(**{ENV_SWITCH: "system"})) == "system None"
    env = _clean_env(**{ENV_SWITCH: "system"})
    assert allocator_env(env) == env


def test_an_allocator_the_user_preloaded_is_kept():
    env = _clean_env(LD_PRELOAD="/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    assert allocator_env(env) == env
    once = allocator_env(_clean_env())
    assert allocator_env(once) == once  # mimalloc already there: not added twice


def test_bad_switch_value_is_a_clear_error():
    with pytest.raises(ValueError, match="mimalloc' or 'system'"):
        allocator_env(_clean_env(**{ENV_SWITCH: "tcmalloc"}))
    out = subprocess.run(
        [sys.executable, "-m", "agentic_rl.cli", "train"],
        env=_clean_env(**{ENV_SWITCH: "tcmalloc"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: AGENTIC_RL_ALLOCATOR must be 'mimalloc' or 'system', got 'tcmalloc'"
    ]


def test_a_library_that_does_not_load_is_skipped(tmp_path, monkeypatch):
    broken = tmp_path / "libmimalloc.so.3"
    broken.write_bytes(b"not an ELF file")
    monkeypatch.setattr(allocator, "mimalloc_path", lambda: broken)
    env = _clean_env()
    assert allocator_env(env) == env


def test_this_process_reports_its_allocator():
    assert active_allocator() in ("mimalloc", "system")


def test_train_command_runs_under_mimalloc_and_records_it(tiny_model_dir, tmp_path):
    """The real command: ``python -m agentic_rl.cli train`` re-executes itself under mimalloc and
    the run's summary.json says so (a one-step run of a tiny random Llama)."""
    overrides = [
        f"model.path='{tiny_model_dir}'",
        "model.num_threads=1",
        "algorithm.steps=1",
        *SIMPLE_SAMPLING,
        "algorithm.tasks_per_step=1",
        "algorithm.group_size=2",
        "warmup.enabled=false",
        "eval.size=1",
        "eval.base=false",
        "rollout.max_new_tokens=8",
        f"output_dir='{tmp_path}'",
        "tracking.tensorboard=false",
    ]
    cmd = [
        sys.executable,
        "-m",
        "agentic_rl.cli",
        "train",
        *[a for o in overrides for a in ("--set", o)],
    ]
    out = subprocess.run(
        cmd, env=_clean_env(HF_HUB_OFFLINE="1"), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["allocator"] == "mimalloc"


def test_browsers_get_an_environment_without_a_preloaded_malloc():
    """Chromium exits at start under the trainer's mimalloc (tests/envs/test_miniwob.py has the
    real-browser regression test)."""
    env = {
        "LD_PRELOAD": "/x/libmimalloc.so.3:/y/libfoo.so",
        "MIMALLOC_PURGE_DELAY": "-1",
        "MIMALLOC_VERBOSE": "1",
        "PATH": "/bin",
    }
    assert browser_environment(env) == {"LD_PRELOAD": "/y/libfoo.so", "PATH": "/bin"}
    assert env["MIMALLOC_VERBOSE"] == "1"  # a copy: the caller's mapping is unchanged
    only = browser_environment({"LD_PRELOAD": "/x/libmimalloc.so", "HOME": "/h"})
    assert only == {"HOME": "/h"}
    jemalloc = {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2 /y/libbar.so"}
    assert browser_environment(jemalloc) == {"LD_PRELOAD": "/y/libbar.so"}
