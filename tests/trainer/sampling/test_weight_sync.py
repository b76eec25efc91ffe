"""Policy versions on trajectories and their staleness."""

from __future__ import annotations

import pytest

from agentic_rl.trainer.sampling.weight_sync import (
    policy_version_of,
    staleness,
    stamp_policy_version,
)
from agentic_rl.types import StopReason, Trajectory


def _traj(version=None) -> Trajectory:
    return Trajectory(
        "e-v0",
        0,
        "g",
        "t",
        (),
        (),
        (1, 2),
        (0, 1),
        (0.0, -1.0),
        StopReason.TERMINATED,
        policy_version=version,
    )


def test_stamp_keeps_versions_a_backend_already_set():
    fresh, lagging = stamp_policy_version([_traj(), _traj(2)], 5)
    assert policy_version_of(fresh) == 5 and policy_version_of(lagging) == 2
    assert policy_version_of(_traj()) is None
    # lags 5-5 = 0 and 5-2 = 3: mean 1.5, max 3
    assert staleness([fresh, lagging, _traj()], 5) == {
        "rollout/staleness_mean": 1.5,
        "rollout/staleness_max": 3.0,
    }
    assert staleness([_traj()], 5) == {}
    with pytest.raises(ValueError, match="version"):
        stamp_policy_version([_traj()], -1)
