"""Policy versions on trajectories and the publish (reload) path."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.trainer.sampling.weight_sync import (
    policy_version_of,
    publish_weights,
    read_published_version,
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


def test_published_weights_reload_identically(tiny_model_dir, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(0.5)  # "trained": differs from the start weights
    path = publish_weights(model, tokenizer, tmp_path / "published", 3)
    assert path.name == "v3" and read_published_version(path) == 3
    reloaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name
    with pytest.raises(FileNotFoundError):
        read_published_version(tmp_path)
