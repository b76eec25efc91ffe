"""benchmarks/learning.py on synthetic run directories (real TrajectoryStore, no model, no training).

Run "seed 0": 20 held-out tasks, levels a/b alternating (even seeds a). warm-up solves tasks
0-9, final solves tasks 0-14 (task 15 also "solves" but fails with an error: counts as a miss), so
the lift is 5/20 = +25 points and no task got worse (the paired interval stays >= 0).
Run "seed 1": warm-up and final both solve tasks 0-9: lift 0 with a zero-width interval.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
from agentic_rl.types import StopReason
from tests.trajectories.conftest import build_trajectory

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "learning.py"
TASKS = 20


@pytest.fixture(scope="module")
def learning():
    spec = importlib.util.spec_from_file_location("learning_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _eval_batch(solved: range, tag: str, step: int, failed: tuple[int, ...] = ()) -> list[dict]:
    records = []
    for task in range(TASKS):
        t = dataclasses.replace(
            build_trajectory(task),
            seed=1_000_000 + task,
            trajectory_id=f"{tag}-{task}",
            reward_components={"outcome": 1.0 if task in solved or task in failed else 0.0},
            info={"level": "a" if task % 2 == 0 else "b"},
            stop_reason=StopReason.ERROR if task in failed else StopReason.TERMINATED,
        )
        records.append(trajectory_to_record(t, phase="eval", tag=tag, step=step, rl_step=step))
    return records


def make_run(
    root: Path, name: str, seed: int, final_solved: range, failed: tuple[int, ...] = ()
) -> Path:
    run = root / name
    store = TrajectoryStore(run / "trajectories")
    store.append(_eval_batch(range(0), "base", 0))
    store.append(_eval_batch(range(10), "warmup", 0))
    store.append(_eval_batch(range(12), "rl-step-2", 2))
    store.append(_eval_batch(final_solved, "final", 4, failed))
    rows = [
        {"phase": "rl", "step": s, "perf/rollout_time_s": float(s), "perf/update_time_s": 3.0 + s}
        for s in (1, 2, 3)
    ] + [{"phase": "eval", "tag": "final", "eval/success": 0.7}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "config.toml").write_text(f'name = "{name}"\nseed = {seed}\n')
    (run / "summary.json").write_text(
        json.dumps({"timings_seconds": {"total_seconds_this_process": 600.0}})
    )
    return run


def test_analyse_mode_figures(learning, tmp_path, capsys):
    runs = [
        make_run(tmp_path, "r0", 0, range(15), failed=(15,)),
        make_run(tmp_path, "r1", 1, range(10)),
    ]
    out = tmp_path / "out"
    assert learning.main(["--runs", *map(str, runs), "--out", str(out), "--resamples", "2000"]) == 0
    summary = json.loads((out / "learning.json").read_text())
    assert (out / "learning.png").read_bytes().startswith(b"\x89PNG")
    r0, r1 = summary["runs"]
    assert r0["label"] == "seed 0" and r0["seed"] == 0
    assert list(r0["points"]) == ["base", "warmup", "rl-step-2", "final"]
    # warm-up 10/20: Wilson centre 0.5, half 1.959964/1.192073 · sqrt(0.0125 + 0.0024) = 0.2007 -> [0.299, 0.701];
    # final 15/20 (task 15 failed): [0.531, 0.888]; per level: a = even tasks
    assert (r0["before"]["successes"], r0["before"]["n"]) == (10, 20)
    assert r0["before"]["low"] == pytest.approx(0.2993, abs=1e-3)
    assert r0["before"]["high"] == pytest.approx(0.7007, abs=1e-3)
    assert r0["after"]["low"] == pytest.approx(0.531, abs=1e-3)
    assert r0["after"]["successes"] == 15 and r0["after"]["estimate"] == 0.75
    assert (
        r0["after"]["levels"]["a"]["successes"] == 8
        and r0["after"]["levels"]["b"]["successes"] == 7
    )
    assert r0["before"]["levels"]["a"]["n"] == 10
    lift = r0["lift_points"]
    assert lift["n_tasks"] == 20 and lift["estimate"] == pytest.approx(25.0)
    assert 0.0 <= lift["low"] < 25.0 < lift["high"] <= 50.0  # 5 of 20 tasks gained, none lost
    assert r0["lift_points_by_level"]["a"]["estimate"] == pytest.approx(
        30.0
    )  # tasks 10, 12, 14 of 10
    assert r0["lift_points_by_level"]["b"]["estimate"] == pytest.approx(20.0)  # tasks 11, 13
    assert r1["lift_points"] == {"n_tasks": 20, "estimate": 0.0, "low": 0.0, "high": 0.0}
    assert r0["perf"]["median_rollout_time_s"] == 2.0 and r0["perf"]["median_update_time_s"] == 5.0
    assert r0["perf"]["wall_s"] == 600.0 and r0["perf"]["rl_steps"] == 3
    mean = summary["mean_lift_points"]
    assert mean["n_runs"] == 2 and mean["estimate"] == pytest.approx(12.5)
    # run 1 contributes a constant 0, so the pooled interval is run 0's, halved
    assert mean["low"] == pytest.approx(lift["low"] / 2, abs=2.6) and mean["high"] <= 25.0
    printed = capsys.readouterr().out
    assert "| seed 0 (n=20) | 50 % [30, 70] | 75 % [53, 89] | +25.0 [" in printed
    assert "a 50→80, b 50→70" in printed and "| 10.0 min | 2.0 / 5.0 |" in printed
    assert "| mean of 2 | | | +12.5 [" in printed
    assert summary["markdown"] in printed


def test_other_tags_and_missing_tag(learning, tmp_path):
    run = make_run(tmp_path, "r0", 0, range(15))
    summary = learning.analyse([run], before="base", after="rl-step-2", resamples=200)
    assert summary["runs"][0]["lift_points"]["estimate"] == pytest.approx(60.0)  # 0/20 -> 12/20
    with pytest.raises(ValueError, match="no held-out eval tagged"):
        learning.analyse([run], before="nope", resamples=10)
    with pytest.raises(ValueError, match="found none"):  # not a run directory
        learning.analyse([tmp_path], resamples=10)


def test_train_mode_runs_one_subprocess_per_seed(learning, tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, check):  # stands in for `agentic-rl train`: builds the run dir it was told to
        calls.append(cmd)
        sets = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--set")
        seed = int(sets["seed"])
        make_run(
            Path(json.loads(sets["output_dir"])), json.loads(sets["name"]), seed, range(10 + seed)
        )

    monkeypatch.setattr(learning.subprocess, "run", fake_run)
    out = tmp_path / "learn"
    learning.main(
        [
            "--seeds",
            "0",
            "2",
            "--out",
            str(out),
            "--config",
            "c.toml",
            "--set",
            "algorithm.steps=3",
            "--resamples",
            "100",
        ]
    )
    assert [c[c.index("--config") + 1] for c in calls] == ["c.toml", "c.toml"]
    assert all(c[2:4] == ["agentic_rl.cli", "train"] and "algorithm.steps=3" in c for c in calls)
    summary = json.loads((out / "learning.json").read_text())
    assert [r["run_dir"] for r in summary["runs"]] == [str(out / "seed-0"), str(out / "seed-2")]
    assert [r["lift_points"]["estimate"] for r in summary["runs"]] == [0.0, pytest.approx(10.0)]
    assert all(r["perf"]["wall_s"] < 60 for r in summary["runs"])  # measured around the subprocess
    with pytest.raises(FileExistsError):  # never trains over an existing run
        learning.main(["--seeds", "0", "--out", str(out)])


def test_plot_axis_orders_eval_tags_by_step(learning):
    """Runs with different eval points (one with rl-step-K, one without) share one step-ordered
    axis: base, warmup, rl-step-3, rl-step-9, final, then unknown tags in first-seen order."""
    runs = [
        {"points": dict.fromkeys(["base", "warmup", "final", "custom"])},
        {"points": dict.fromkeys(["warmup", "rl-step-9", "rl-step-3", "final"])},
    ]
    assert learning.axis_tags(runs) == [
        "base",
        "warmup",
        "rl-step-3",
        "rl-step-9",
        "final",
        "custom",
    ]
