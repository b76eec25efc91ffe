"""Reward functions have a time limit per call (issue 39, item 13).

Before, ``Rubric.score`` called each function inline: a verifier that hangs (a test suite, a
proof checker, a judge) hung the trainer. Now a call past ``[reward] timeout_s`` (or the
function's own ``timeout_s``) fails its trajectory loudly, as a raising function does: an error
logged, ``failure`` set, counted in ``rollout/failed``, never a silent 0. Every test here ends
in about a second although its verifier sleeps forever.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.rewards import RewardError, RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.deadline import abandoned_calls
from agentic_rl.types import StopReason, Trajectory

OUTCOME = RewardGroup.OUTCOME


def _traj(tid: str, **info) -> Trajectory:
    return Trajectory("x-v0", 0, "g", tid, (), (), (), (), (), StopReason.TERMINATED, info=info)


def _forever_if_asked(trajectory: Trajectory) -> float:
    """A verifier that never returns on trajectories marked ``hang`` (sleeps forever)."""
    if trajectory.info.get("hang"):
        threading.Event().wait()
    return 1.0


def test_a_verifier_that_sleeps_forever_fails_its_trajectory_loudly(caplog):
    rubric = Rubric(
        [RewardFunction("verifier", OUTCOME, _forever_if_asked)], RewardWeights(timeout_s=0.5)
    )
    started = time.monotonic()
    before = abandoned_calls()
    with caplog.at_level(logging.ERROR):
        stuck, fine = rubric.apply_batch([_traj("stuck", hang=True), _traj("fine")])
    assert time.monotonic() - started < 5
    assert stuck.failed and stuck.reward is None and stuck.reward_components == {}
    assert stuck.failure == "reward function 'verifier' timed out after 0.5 s"
    assert not fine.failed and fine.reward == 1.0
    assert abandoned_calls() == before + 1  # its thread is counted
    logged = caplog.text
    assert "trajectory stuck excluded: reward function 'verifier' timed out after 0.5 s" in logged
    assert "its thread is left running" in logged


def test_the_failure_is_counted_in_the_rollout_metrics():
    from agentic_rl.trainer.evaluation.held_out import summarize

    rubric = Rubric(
        [RewardFunction("verifier", OUTCOME, _forever_if_asked)], RewardWeights(timeout_s=0.3)
    )
    scored = rubric.apply_batch([_traj("a", hang=True), _traj("b")])
    assert summarize(scored, "rollout")["rollout/failed"] == 0.5


def test_a_function_s_own_limit_wins():
    slow = RewardFunction("slow", OUTCOME, _forever_if_asked, timeout_s=0.2)
    rubric = Rubric([slow])  # the rubric's own limit: the default 60 s
    assert rubric.weights.timeout_s == 60.0
    started = time.monotonic()
    with pytest.raises(RewardError, match="'slow' timed out after 0.2 s"):
        rubric.score(_traj("t", hang=True))
    assert time.monotonic() - started < 3


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_function_that_is_not_thread_safe_runs_in_a_child_killed_at_the_limit(tmp_path):
    """The child and a process it started (a test suite under the verifier) are both killed."""
    pid_file = tmp_path / "pid"

    def runs_a_suite(trajectory: Trajectory) -> float:
        if trajectory.info.get("hang"):
            suite = subprocess.Popen(["sleep", "1000"])
            pid_file.write_text(str(suite.pid))
            threading.Event().wait()
        return float(os.getpid() != parent)  # 1.0: it ran in another process

    parent = os.getpid()
    suite_fn = RewardFunction("suite", OUTCOME, runs_a_suite, thread_safe=False)
    rubric = Rubric([suite_fn], RewardWeights(timeout_s=1.0))
    started = time.monotonic()
    stuck, fine = rubric.apply_batch([_traj("stuck", hang=True), _traj("fine")])
    assert time.monotonic() - started < 5
    assert stuck.failure == "reward function 'suite' timed out after 1 s (its process was killed)"
    assert fine.reward == 1.0
    suite_pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(suite_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(suite_pid)


def test_a_child_that_raises_or_returns_nan_fails_its_trajectory():
    def bad(trajectory: Trajectory) -> float:
        if trajectory.info.get("raise"):
            raise ValueError("no verdict")
        return math.nan

    rubric = Rubric([RewardFunction("bad", OUTCOME, bad, thread_safe=False)])
    raised, nan = rubric.apply_batch([_traj("r", **{"raise": True}), _traj("n")])
    assert raised.failure == "reward function 'bad' raised ValueError: no verdict"
    assert nan.failure == "reward function 'bad' returned nan"


def test_the_limit_is_a_reward_config_key(tmp_path):
    assert load_config().reward.timeout_s == 60.0
    assert load_config(overrides=["reward.timeout_s=5"]).reward.timeout_s == 5.0
    for bad in ("0", "-1.0"):
        with pytest.raises(ConfigError, match="reward.timeout_s"):
            load_config(overrides=[f"reward.timeout_s={bad}"])
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        RewardFunction("f", OUTCOME, _forever_if_asked, timeout_s=0.0)
