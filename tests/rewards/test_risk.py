"""Built-in risk components, counted from ``Turn.risk_events`` (values worked by hand)."""

from __future__ import annotations

import math

import pytest

from agentic_rl.rewards import RewardFunction, RewardGroup, Rubric
from agentic_rl.rewards.risk import (
    denied_calls,
    outside_workspace_attempts,
    risk_functions,
    sandbox_limit_hits,
)
from agentic_rl.types import Action, RiskEvent, StopReason, Trajectory, Turn


def _traj(*turn_events):
    turns = tuple(
        Turn(
            i,
            Action(""),
            None,
            0.0,
            (),
            (),
            (),
            (),
            {},
            risk_events=tuple(
                RiskEvent.from_dict(e) if isinstance(e, dict) else e for e in ev or ()
            ),
        )
        for i, ev in enumerate(turn_events)
    )
    return Trajectory("x-v0", 0, "g", "t", (), turns, (), (), (), StopReason.TERMINATED)


DENIED = {"category": "denied", "tool": "rm", "reason": "irreversible", "denied": True}
OUTSIDE = {
    "category": "path_outside_workspace",
    "tool": "write_file",
    "reason": "../x",
    "denied": True,
}
LIMIT = {"category": "sandbox_limit", "tool": "python", "reason": "timeout"}


def test_counts():
    traj = _traj([DENIED, OUTSIDE], None, [LIMIT, LIMIT], [DENIED])
    assert denied_calls(traj) == 3.0  # both denials of turn 0 and the one of turn 3
    assert outside_workspace_attempts(traj) == 1.0
    assert sandbox_limit_hits(traj) == 2.0
    empty = _traj(None, [])
    assert (
        denied_calls(empty) == sandbox_limit_hits(empty) == outside_workspace_attempts(empty) == 0.0
    )


def test_rubric_subtracts_weighted_risk():
    traj = _traj([DENIED, OUTSIDE], [LIMIT])
    rubric = Rubric([RewardFunction("one", RewardGroup.OUTCOME, lambda t: 1.0), *risk_functions()])
    total, comps = rubric.score(traj)
    assert all(f.group == RewardGroup.RISK for f in risk_functions())
    # risk group = 0.5*2 (denied) + 0.1*1 (limit) + 0.5*1 (outside) = 1.6; R = 1 - 1.6 = -0.6
    assert math.isclose(comps["risk"], 1.6) and math.isclose(total, -0.6)
    assert (
        comps["denied_calls"],
        comps["sandbox_limit_hits"],
        comps["outside_workspace_attempts"],
    ) == (2.0, 1.0, 1.0)
    weights = {
        f.name: f.weight
        for f in risk_functions(denied=1.0, sandbox_limit=0.0, outside_workspace=2.0)
    }
    assert weights == {
        "denied_calls": 1.0,
        "sandbox_limit_hits": 0.0,
        "outside_workspace_attempts": 2.0,
    }


def test_malformed_events_fail_the_trajectory_loudly():
    traj = _traj(["not a dict"])
    with pytest.raises(TypeError, match="risk_events"):
        denied_calls(traj)
    scored = Rubric(risk_functions()).apply(traj)
    assert scored.failed and scored.reward is None
