"""pass@k (Chen et al. 2021) and the evaluation report, against values worked out by hand."""

from __future__ import annotations

import pytest

from agentic_rl.trainer.evaluation.metrics import compare_reports, eval_report, pass_at_k
from agentic_rl.types import StopReason
from tests.trajectories.conftest import build_trajectory


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 1, 3, 0.6),  # 1 - C(4,3)/C(5,3) = 1 - 4/10
        (10, 1, 1, 0.1),  # pass@1 = c/n
        (4, 0, 1, 0.0),
        (3, 3, 2, 1.0),
        (4, 3, 2, 1.0),  # n - c = 1 < k: every 2-subset holds a success
    ],
)
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_bad_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def _traj(i, group, success, stop=StopReason.TERMINATED):
    t = build_trajectory(i, reward=1.0 if success else 0.0, stop_reason=stop)
    comps = {"outcome": 1.0 if success else 0.0, "correct_answer": 1.0 if success else 0.0}
    return t.__class__(**{**t.__dict__, "group_id": group, "reward_components": comps})


def test_eval_report_by_hand():
    # task A: 2 of 2 succeed; task B: 1 of 2 (the failure hit max_turns)
    trajs = [
        _traj(0, "A", True),
        _traj(1, "A", True),
        _traj(2, "B", True),
        _traj(3, "B", False, StopReason.MAX_TURNS),
    ]
    r = eval_report(trajs, k=2, wall_seconds=1.5)
    assert (r["episodes"], r["tasks"], r["samples_per_task"]) == (4, 2, 2)
    assert r["success"] == 0.75
    assert r["pass@1"] == pytest.approx((1.0 + 0.5) / 2)  # per task c/n, averaged
    assert r["pass@2"] == pytest.approx((1.0 + 1.0) / 2)  # B: 1 - C(1,2)/C(2,2) = 1
    assert r["return_mean"] == 0.75 and r["reward_components"] == {
        "outcome": 0.75,
        "correct_answer": 0.75,
    }
    # each build_trajectory: 4 sampled of 6 tokens, 1 tool call, 2 turns
    assert r["cost"] == {
        "generated_tokens": 4.0,
        "total_tokens": 6.0,
        "tool_calls": 1.0,
        "wall_seconds": 1.5,
    }
    assert r["turns_mean"] == 2.0 and r["stop_reasons"] == {"terminated": 3, "max_turns": 1}
    # each build_trajectory's first turn holds one RiskEvent (a denied call): 4 events, 4 episodes
    assert r["risk_incidents"] == {"events": 4, "episodes": 4} and r["failed"] == 0
    with pytest.raises(ValueError, match="pass@3 needs >= 3 samples"):
        eval_report(trajs, k=3)
    with pytest.raises(ValueError):
        eval_report([])


def test_compare_reports_flattens_and_subtracts():
    rows = compare_reports(
        {"success": 0.5, "cost": {"tool_calls": 1.0}, "model": "a"},
        {"success": 0.75, "cost": {"tool_calls": 2.0}, "model": "b", "new": 1},
    )
    assert rows == [
        ("success", 0.5, 0.75, 0.25),
        ("cost/tool_calls", 1.0, 2.0, 1.0),
        ("model", "a", "b", None),
        ("new", None, 1, None),
    ]
