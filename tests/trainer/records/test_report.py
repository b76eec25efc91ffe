"""Tests for trainer.report.write_report on a synthetic run directory."""

from __future__ import annotations

import base64
import json
import re

import pytest

from agentic_rl.trainer.records.report import load_metrics, write_report

LEVELS = ("easy", "medium", "hard")
COMPONENTS = ("correct_answer", "tool_call_format", "tool_calls", "tokens")


def _metrics_rows() -> list[dict]:
    rows: list[dict] = [
        {
            "phase": "eval",
            "step": 0,
            "tag": "base",
            "eval/success": 0.125,
            **{f"eval/success/{lv}": 0.25 / (i + 1) for i, lv in enumerate(LEVELS)},
            "eval/reward/correct_answer": 0.1,
            "eval/tool_calls": 0.5,
        }
    ]
    rows += [{"phase": "warmup", "step": s, "train/loss": 2.0 / (s + 1)} for s in range(5)]
    rows.append(
        {
            "phase": "eval",
            "step": 5,
            "tag": "warmup",
            "eval/success": 0.375,
            "eval/success/easy": 0.5,
            "eval/success/medium": 0.375,
            "eval/success/hard": 0.25,
            "eval/tool_calls": 1.25,
        }
    )
    for s in range(1, 11):
        rows.append(
            {
                "phase": "rl",
                "step": s,
                "rollout/reward_total": 0.1 * s,
                **{f"rollout/reward/{c}": 0.01 * s * (j + 1) for j, c in enumerate(COMPONENTS)},
                "rollout/success": 0.05 * s,
                "rollout/turns": 2.0,
                "rollout/tool_calls": 1.0,
                "train/loss": 0.5 - 0.01 * s,
                "train/kl": 0.001 * s,
                "train/clip_fraction": 0.1,
                "train/entropy": 1.5,
                "perf/step_time_s": 3.0,
                "perf/tokens_per_s": 900.0,
                "some/unknown_metric": 7,
                "text/not_numeric": "ignored",
            }
        )
    rows.append(
        {
            "phase": "eval",
            "step": 10,
            "tag": "final",
            "eval/success": 0.6875,
            "eval/success/easy": 0.875,
            "eval/success/medium": 0.625,
            "eval/success/hard": 0.5625,
            "eval/tool_calls": 1.5,
        }
    )
    return rows


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run-<1>"
    d.mkdir()
    lines = [json.dumps(r) for r in _metrics_rows()]
    (d / "metrics.jsonl").write_text("\n".join(lines) + '\n{"phase": "rl", "ste')
    (d / "config.toml").write_text('[run]\nname = "<script>alert(1)</script> & co"\n')
    (d / "summary.json").write_text(
        json.dumps({"final_success": 0.6875, "note": "a<b", "levels": ["easy", "hard"]})
    )
    from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
    from tests.trajectories.conftest import build_trajectory

    TrajectoryStore(d / "trajectories").append(
        [trajectory_to_record(build_trajectory(i), phase="rl", step=i + 1) for i in range(3)]
    )
    return d


def _images(text: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', text)]


def test_report_is_self_contained_with_plots_and_tables(run_dir):
    out = write_report(run_dir)
    assert out == run_dir / "report.html" and out.is_file()
    assert not (run_dir / "report.html.tmp").exists()
    text = out.read_text(encoding="utf-8")
    images = _images(text)
    # eval success, reward components, losses, kl/clip/entropy, rollouts, throughput
    assert (
        len(images) == 8
    )  # eval, reward groups, reward components, loss, KL, rollouts, store panels, throughput
    assert all(img.startswith(b"\x89PNG\r\n\x1a\n") for img in images)
    assert "no data" not in text
    assert not re.search(r'(src|href)="(?!data:)', text)  # no external assets
    # Eval table: one row per eval tag with overall and per-level success (no eval records in the
    # store and no eval.size in config.toml: the number of tasks is unknown, so no intervals).
    for cells in (
        ["base", "0", "–", "0.125", "0.250", "0.125", "0.083", "0.500"],
        ["warmup", "5", "–", "0.375", "0.500", "0.375", "0.250", "1.250"],
        ["final", "10", "–", "0.688", "0.875", "0.625", "0.562", "1.500"],
    ):
        assert "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>" in text
    assert "<th>easy</th><th>medium</th><th>hard</th>" in text  # first-seen order
    # Config verbatim but escaped; summary table escaped.
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in text
    assert "<script>" not in text
    assert "<td>final_success</td><td>0.688</td>" in text
    assert "<td>a&lt;b</td>" in text and "run-&lt;1&gt;" in text


def test_empty_run_dir_shows_no_data(tmp_path):
    text = write_report(tmp_path).read_text()
    assert _images(text) == []
    assert text.count("no data") == 10  # every section (the reward section has two panels)


def test_empty_files_and_missing_keys_do_not_crash(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(
            [
                "",
                "not json",
                "[1, 2]",
                json.dumps({"phase": "rl", "step": 1}),  # no metrics at all
                json.dumps({"phase": "rl", "rollout/reward_total": 1.0}),  # no step
                json.dumps({"phase": "eval", "eval/tool_calls": 1.0}),  # no tag, no success
                json.dumps({"phase": "other", "train/loss": 1.0}),
                json.dumps({"step": 3, "train/loss": 1.0}),  # no phase
            ]
        )
        + "\n"
    )
    (tmp_path / "config.toml").write_text("")
    (tmp_path / "summary.json").write_text("{not json")
    text = write_report(tmp_path).read_text()
    assert len(_images(text)) == 1  # only the reward plot has data
    assert "unreadable summary.json" in text
    assert "<td>#0</td>" in text  # eval row without tag or step still listed


def test_load_metrics_skips_bad_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert load_metrics(path) == []
    path.write_text('{"step": 1}\n\nbroken\n{"step": 2}\n{"st')
    assert load_metrics(path) == [{"step": 1}, {"step": 2}]


def test_missing_run_dir_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "nope")


def test_store_rows_by_hand(tmp_path):
    from agentic_rl.trainer.records.report import store_rows
    from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
    from agentic_rl.types import StopReason
    from tests.trajectories.conftest import build_trajectory

    assert store_rows(tmp_path) == []  # no store: no rows
    store = TrajectoryStore(tmp_path / "trajectories")
    # build_trajectory: 1 tool call, 2 tool results (1 failed), 6 tokens of which 4 sampled
    store.append(
        [
            trajectory_to_record(build_trajectory(0), phase="rl", step=1),
            trajectory_to_record(
                build_trajectory(1, stop_reason=StopReason.MAX_TURNS), phase="rl", step=1
            ),
            trajectory_to_record(build_trajectory(2), phase="eval", step=1),
        ]
    )  # eval rows are not counted
    store.append([trajectory_to_record(build_trajectory(3), phase="rl", step=2)])
    rows = store_rows(tmp_path)
    assert rows == [
        {
            "step": 1,
            "stop/max_turns": 0.5,
            "stop/terminated": 0.5,
            "tools/calls_per_episode": 1.0,
            "tools/error_rate": 0.5,
            "length/generated_tokens": 4.0,
            "length/total_tokens": 6.0,
        },
        {
            "step": 2,
            "stop/terminated": 1.0,
            "tools/calls_per_episode": 1.0,
            "tools/error_rate": 0.5,
            "length/generated_tokens": 4.0,
            "length/total_tokens": 6.0,
        },
    ]
    write_report(tmp_path)
    assert "Trajectories: stop reasons" in (tmp_path / "report.html").read_text()


def _eval_records(tag: str, solved: int, n: int, step: int) -> list[dict]:
    """n held-out records of one eval tag, the first ``solved`` successful; levels x/y alternate."""
    import dataclasses

    from agentic_rl.trajectories import trajectory_to_record
    from tests.trajectories.conftest import build_trajectory

    return [
        trajectory_to_record(
            dataclasses.replace(
                build_trajectory(i),
                seed=1000 + i,
                reward_components={"outcome": float(i < solved)},
                info={"level": "xy"[i % 2]},
            ),
            phase="eval",
            tag=tag,
            step=step,
        )
        for i in range(n)
    ]


def test_held_out_points_carry_wilson_intervals(tmp_path):
    from agentic_rl.trainer.records.report import eval_counts
    from agentic_rl.trajectories import TrajectoryStore

    store = TrajectoryStore(tmp_path / "trajectories")
    store.append(_eval_records("warmup", 50, 100, 0))  # 50/100; x: 25/50, y: 25/50
    store.append(_eval_records("final", 100, 100, 8))  # 100/100
    rows = [
        {
            "phase": "eval",
            "tag": "warmup",
            "step": 0,
            "eval/success": 0.5,
            "eval/success/x": 0.5,
            "eval/success/y": 0.5,
        },
        {
            "phase": "eval",
            "tag": "final",
            "step": 8,
            "eval/success": 1.0,
            "eval/success/x": 1.0,
            "eval/success/y": 1.0,
        },
        {"phase": "eval", "tag": "rl-step-4", "step": 4, "eval/success": 0.0},  # not in the store
        {"phase": "eval", "tag": "rl-step-6", "step": 6, "eval/success": 0.7},
    ]  # not in the store
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    counts = eval_counts(tmp_path)
    assert counts["warmup"] == {
        "eval/success": (50, 100),
        "eval/success/x": (25, 50),
        "eval/success/y": (25, 50),
    }
    text = write_report(tmp_path).read_text()
    # 50/100 -> [0.404, 0.596] (hand values in tests/trainer/evaluation/test_intervals.py); 25/50: p = 0.5,
    # 1 + z²/n = 1.076829, half = 1.959964/1.076829 · sqrt(0.005 + 0.000384) = 0.1335 -> [0.366, 0.634];
    # 100/100: centre = (1 + 0.019207)/1.038415 = 0.98150, half = 1.887456 · 0.0098 = 0.01850 -> [0.963, 1.000]
    assert (
        "<tr><td>warmup</td><td>0</td><td>100</td><td>0.500 [0.404, 0.596]</td>"
        "<td>0.500 [0.366, 0.634]</td><td>0.500 [0.366, 0.634]</td>"
    ) in text
    assert "<td>final</td><td>8</td><td>100</td><td>1.000 [0.963, 1.000]</td>" in text
    assert "<td>rl-step-4</td><td>4</td><td>–</td><td>0.000</td>" in text  # n unknown: no interval
    assert "95 % Wilson" in text and len(_images(text)) == 1
    # with eval.size in config.toml the overall n of the missing tags is known.
    # 0/100: upper = (z²/n)/(1 + z²/n) = 0.038415/1.038415 = 0.0370 -> [0, 0.037];
    # 70/100: centre = (0.7 + 0.019207)/1.038415 = 0.69260, half = 1.887456 · sqrt(0.0021 + 0.000096)
    # = 0.08845 -> [0.604, 0.781]
    (tmp_path / "config.toml").write_text("seed = 0\n[eval]\nsize = 100\n")
    text = write_report(tmp_path).read_text()
    assert "<td>rl-step-4</td><td>4</td><td>100</td><td>0.000 [0.000, 0.037]</td>" in text
    assert "<td>rl-step-6</td><td>6</td><td>100</td><td>0.700 [0.604, 0.781]</td>" in text


def test_error_bars_at_all_solved_levels(tmp_path):
    """33/33 gives a Wilson upper bound of 1 - 1e-16 (rounding): the plot must still draw (regression)."""
    from agentic_rl.trajectories import TrajectoryStore

    TrajectoryStore(tmp_path / "trajectories").append(
        _eval_records("final", 66, 66, 8)
    )  # x: 33/33, y: 33/33
    row = {
        "phase": "eval",
        "tag": "final",
        "step": 8,
        "eval/success": 1.0,
        "eval/success/x": 1.0,
        "eval/success/y": 1.0,
    }
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    text = write_report(tmp_path).read_text()
    assert "<td>final</td><td>8</td><td>66</td><td>1.000 [0.945, 1.000]" in text
