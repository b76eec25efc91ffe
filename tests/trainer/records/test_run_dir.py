"""Run directories, the metrics log and truncation before a resume."""

from __future__ import annotations

import json

from agentic_rl.trainer.records.run_dir import MetricsLog, new_run_dir, truncate_after
from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
from tests.trajectories.conftest import build_trajectory


def test_new_run_dir_never_reuses_a_directory(tmp_path):
    out = tmp_path / "runs"
    assert new_run_dir(str(out), "exp") == out / "exp"
    assert new_run_dir(str(out), "exp") == out / "exp-2"
    assert new_run_dir(str(out), "exp") == out / "exp-3"
    assert all((out / n).is_dir() for n in ("exp", "exp-2", "exp-3"))


def test_metrics_log(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    assert log.rows() == []
    log.write({"phase": "rl", "step": 1, "train/loss": float("nan"), "x": float("inf"), "y": 0.5})
    with open(log.path, "a") as f:
        f.write('{"phase": "rl", "st')  # a torn last line (crash mid-write)
    assert log.rows() == [{"phase": "rl", "step": 1, "train/loss": None, "x": None, "y": 0.5}]
    assert (
        json.loads(log.path.read_text().splitlines()[0])["train/loss"] is None
    )  # strict JSON, no NaN


def test_truncate_after(tmp_path):
    rows = [
        {"phase": "eval", "tag": "base", "rl_step": 0},
        {"phase": "warmup", "step": 1, "rl_step": 0},
        {"phase": "eval", "tag": "warmup", "rl_step": 0},
        {"phase": "rl", "rl_step": 1},
        {"phase": "rl", "rl_step": 2},
        {"phase": "eval", "tag": "rl-step-2", "rl_step": 2},
        {"phase": "rl", "rl_step": 3},
        {"phase": "eval", "tag": "rl-step-3", "rl_step": 3},
        {"phase": "eval", "tag": "final", "rl_step": 3},
    ]
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for r in rows:
        log.write(r)
    store = TrajectoryStore(tmp_path / "trajectories")
    store.append(
        [
            trajectory_to_record(
                build_trajectory(), phase=r["phase"], rl_step=r["rl_step"], tag=r.get("tag"), i=i
            )
            for i, r in enumerate(rows[:4])
        ]
    )
    store.append(
        [
            trajectory_to_record(
                build_trajectory(),
                phase=r["phase"],
                rl_step=r["rl_step"],
                tag=r.get("tag"),
                i=i + 4,
            )
            for i, r in enumerate(rows[4:])
        ]
    )
    truncate_after(tmp_path, 2)
    assert log.rows() == rows[:6]  # steps <= 2 kept; step 3 and the final eval dropped
    assert [r["i"] for r in TrajectoryStore(tmp_path / "trajectories").read()] == [0, 1, 2, 3, 4, 5]
    assert not (tmp_path / "metrics.jsonl.tmp").exists() and not list(
        (tmp_path / "trajectories").glob(".*")
    )
    truncate_after(tmp_path, 0)
    assert [r.get("tag") or r["phase"] for r in log.rows()] == ["base", "warmup", "warmup"]
