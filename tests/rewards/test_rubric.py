"""Rubric: R = λ_o·Σ outcome + λ_p·Σ process − λ_c·Σ cost − λ_r·Σ risk, with components logged."""

from __future__ import annotations

import dataclasses
import logging
import math

import pytest

from agentic_rl.rewards import RewardError, RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.types import StopReason, Trajectory

# the four groups by initial (O as in R_outcome of the design's formula)
O, P, C, R = RewardGroup.OUTCOME, RewardGroup.PROCESS, RewardGroup.COST, RewardGroup.RISK  # noqa: E741


def _traj(**info) -> Trajectory:
    return Trajectory(
        "x-v0", 0, "g", "tid", (), (), (1, 2), (0, 1), (0.0, -0.5), StopReason.TERMINATED, info=info
    )


def _const(v):
    return lambda _t: v


def test_group_signs_and_weights():
    assert [g.sign for g in (O, P, C, R)] == [1.0, 1.0, -1.0, -1.0]
    w = RewardWeights()
    assert (w.outcome, w.process, w.cost, w.risk) == (1.0, 0.1, 1.0, 1.0)
    assert [w.of(g) for g in (O, P, C, R)] == [1.0, 0.1, 1.0, 1.0]


def test_total_by_hand_with_mixed_groups_and_weights():
    rubric = Rubric(
        [
            RewardFunction("o1", O, _const(1.0)),  # w 1
            RewardFunction("o2", O, _const(0.4), weight=0.5),  # 0.5 * 0.4 = 0.2
            RewardFunction("p1", P, _const(0.25), weight=2.0),  # 2 * 0.25 = 0.5
            RewardFunction("logged", P, _const(7.0), weight=0.0),  # logged only
            RewardFunction("c1", C, _const(3), weight=0.1),  # 0.1 * 3 = 0.3 (an int is fine)
            RewardFunction("r1", R, _const(0.5)),  # 0.5
        ],
        RewardWeights(outcome=2.0, process=0.5, cost=1.0, risk=3.0),
    )
    total, comps = rubric.score(_traj())
    # groups: outcome 1 + 0.2 = 1.2; process 0.5 + 0 = 0.5; cost 0.3; risk 0.5
    # R = 2*1.2 + 0.5*0.5 - 1*0.3 - 3*0.5 = 2.4 + 0.25 - 0.3 - 1.5 = 0.85
    assert math.isclose(total, 0.85)
    assert comps["o1"] == 1.0 and comps["o2"] == 0.4 and comps["p1"] == 0.25
    assert comps["logged"] == 7.0 and comps["c1"] == 3.0 and comps["r1"] == 0.5
    assert math.isclose(comps["outcome"], 1.2) and math.isclose(comps["process"], 0.5)
    assert math.isclose(comps["cost"], 0.3) and math.isclose(comps["risk"], 0.5)
    assert set(comps) == {
        "o1",
        "o2",
        "p1",
        "logged",
        "c1",
        "r1",
        "outcome",
        "process",
        "cost",
        "risk",
    }


def test_empty_groups_are_zero():
    total, comps = Rubric([RewardFunction("p", P, _const(1.0))]).score(_traj())
    # only process: 0.1 * 1 = 0.1
    assert math.isclose(total, 0.1)
    assert comps["outcome"] == comps["cost"] == comps["risk"] == 0.0


def test_apply_fills_reward_and_components_without_mutating():
    rubric = Rubric([RewardFunction("o", O, _const(1.0)), RewardFunction("c", C, _const(0.25))])
    traj = _traj(level="direct")
    scored = rubric.apply(traj)
    assert scored.reward == 0.75  # 1*1 - 1*0.25
    assert scored.reward_components["o"] == 1.0 and scored.reward_components["cost"] == 0.25
    assert not scored.failed and scored.info == {"level": "direct"}
    assert traj.reward is None and traj.reward_components == {}


def test_functions_see_the_trajectory():
    rubric = Rubric([RewardFunction("tokens", C, lambda t: t.num_generated_tokens, weight=0.5)])
    total, comps = rubric.score(_traj())
    assert comps["tokens"] == 1.0 and total == -0.5


def _raising(_t):
    raise ZeroDivisionError("division by zero")


@pytest.mark.parametrize(
    "fn, pattern",
    [
        (_raising, "'bad' raised ZeroDivisionError: division by zero"),
        (_const(float("nan")), "'bad' returned nan"),
        (_const(float("inf")), "'bad' returned inf"),
        (_const(float("-inf")), "'bad' returned -inf"),
        (_const("not a number"), "'bad' raised ValueError"),
        (_const(None), "'bad' raised TypeError"),
    ],
)
def test_failing_function_raises_and_excludes_loudly(fn, pattern, caplog):
    rubric = Rubric([RewardFunction("good", O, _const(1.0)), RewardFunction("bad", P, fn)])
    with pytest.raises(RewardError, match=pattern):
        rubric.score(_traj())
    with caplog.at_level(logging.ERROR, logger="agentic_rl.rewards.rubric"):
        scored = rubric.apply(_traj(level="x"))
    assert scored.reward is None and scored.reward_components == {}
    assert scored.failed and "bad" in scored.failure and scored.info["level"] == "x"
    assert any("excluded" in r.getMessage() for r in caplog.records)


def test_zero_weight_failing_function_still_fails():
    """A logged-only metric that breaks must not be a silent 0 either."""
    rubric = Rubric([RewardFunction("metric", P, _const(float("nan")), weight=0.0)])
    assert rubric.apply(_traj()).failed


def test_duplicate_names_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        Rubric([RewardFunction("a", O, _const(1.0)), RewardFunction("a", C, _const(1.0))])


def test_group_names_rejected_as_function_names():
    with pytest.raises(ValueError, match="group names"):
        Rubric([RewardFunction("cost", C, _const(1.0))])


def test_apply_batch_calls_prefetch_once_before_scoring():
    seen: list[int] = []
    scores: dict[str, float] = {}

    def prefetch(batch):
        seen.append(len(batch))
        scores.update({t.trajectory_id: 0.5 for t in batch})

    rubric = Rubric([RewardFunction("b", O, lambda t: scores[t.trajectory_id], prefetch=prefetch)])
    batch = [_traj(), dataclasses.replace(_traj(), trajectory_id="t2")]
    out = rubric.apply_batch(batch)
    assert seen == [2] and [t.reward for t in out] == [0.5, 0.5]


def test_apply_batch_prefetch_failure_excludes_the_batch_loudly(caplog):
    def prefetch(_batch):
        raise ConnectionError("judge down")

    rubric = Rubric([RewardFunction("b", O, _const(1.0), prefetch=prefetch)])
    with caplog.at_level(logging.ERROR):
        out = rubric.apply_batch([_traj(), _traj()])
    assert all(t.reward is None and "judge down" in t.failure for t in out)
    assert "2 trajectories excluded" in caplog.text
