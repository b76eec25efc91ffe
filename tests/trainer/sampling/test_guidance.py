"""Off-policy guidance (``sampling.guidance = "oracle"``): which groups are guided, the restamped
logprobs, and a run on the tiny random model whose own rollouts never succeed."""

from __future__ import annotations

from collections import Counter

import pytest

from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trainer.sampling.guidance import failed_groups, is_guided, restamp_logprobs
from agentic_rl.trajectories import TrajectoryStore
from agentic_rl.types import Action, StopReason, Trajectory, Turn


def _traj(gid: str, outcome: float | None, tid: str = "") -> Trajectory:
    return Trajectory(
        "x-v0",
        0,
        gid,
        tid or f"{gid}-{outcome}",
        (),
        (),
        (1,),
        (1,),
        (0.0,),
        StopReason.TERMINATED if outcome is not None else StopReason.ERROR,
        reward=outcome,
        reward_components={} if outcome is None else {"outcome": outcome},
    )


def test_failed_groups_are_those_with_scored_rollouts_and_no_success():
    batch = [
        _traj("a", 0.0, "a1"),
        _traj("a", 0.0, "a2"),  # all failed: guided
        _traj("b", 0.0, "b1"),
        _traj("b", 1.0, "b2"),  # one success: not
        _traj("c", None, "c1"),
        _traj("c", None, "c2"),  # nothing scored: not
        _traj("d", None, "d1"),
        _traj("d", 0.5, "d2"),  # partial outcome, the failed one ignored: guided
    ]
    assert failed_groups(batch) == ["a", "d"]
    assert failed_groups([]) == []


def _turn(index: int, n: int) -> Turn:
    return Turn(index, Action(text=""), None, 0.0, (), (7,) * n, (1,) * n, (0.0,) * n)


def test_restamp_logprobs_rewrites_the_flat_stream_and_each_turns_span():
    t = Trajectory(
        "x-v0",
        0,
        "g",
        "t",
        (),
        (_turn(0, 2), _turn(1, 3)),
        (7,) * 6,  # two turns' spans, then one trailing env token
        (1, 1, 1, 1, 1, 0),
        (0.0,) * 6,
        StopReason.TERMINATED,
        info={"level": "word"},
    )
    out = restamp_logprobs(t, [-0.1, -0.2, -0.3, -0.4, -0.5, 0.0])
    assert out.logprobs == (-0.1, -0.2, -0.3, -0.4, -0.5, 0.0)
    assert [turn.logprobs for turn in out.turns] == [(-0.1, -0.2), (-0.3, -0.4, -0.5)]
    assert out.token_ids == t.token_ids and out.info == t.info and t.logprobs == (0.0,) * 6
    assert not is_guided(out) and is_guided(
        Trajectory(**{**t.__dict__, "info": {"guidance": "oracle"}})
    )
    with pytest.raises(ValueError, match="5 logprobs for 6 tokens"):
        restamp_logprobs(t, [0.0] * 5)


def test_guidance_is_validated():
    with pytest.raises(ConfigError, match="sampling.guidance"):
        load_config(None, ["sampling.guidance='teacher'"])
    with pytest.raises(ConfigError, match="sampling.guidance_groups"):
        load_config(None, ["sampling.guidance_groups=-1"])
    assert load_config(None, []).sampling.guidance == "oracle"  # the shipped recipe


def test_oracle_guidance_makes_all_failed_groups_trainable(tiny_model_dir, tmp_path):
    """The tiny random model never succeeds, so without guidance no group is informative and
    nothing trains (test_recipe's dynamic-sampling test). With guidance each round's first
    failed group gets the oracle's episode: every step trains on guided groups of G rollouts,
    the oracle's tokens carry the trainer's logprobs (not the script's 0.0), and the policy's
    own rollout success stays 0 in the metrics."""
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            "model.num_threads=1",
            f"output_dir='{tmp_path}'",
            "algorithm.steps=2",
            "algorithm.tasks_per_step=2",
            "algorithm.group_size=3",
            "sampling.rollout_tasks=3",
            "sampling.max_sample_rounds=2",
            "sampling.guidance='oracle'",
            "sampling.guidance_groups=1",
            "warmup.enabled=false",
            "eval.base=false",
            "eval.size=1",
            "rollout.max_new_tokens=48",
            "rollout.max_turns=3",
            "tracking.tensorboard=false",
        ],
    )
    run_dir = train(config)
    rl = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r.get("phase") == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        # one guided group per round: 2 rounds to fill 2 groups, both guided
        assert r["rollout/sample_rounds"] == 2 and r["rollout/groups_informative"] == 2
        assert r["rollout/groups_guided"] == 2 and r["rollout/groups_trained"] == 2
        assert r["train/trajectories"] == 6 and r["rollout/success"] == 0.0
    records = list(TrajectoryStore(run_dir / "trajectories").read(phase="rl"))
    guided = [r for r in records if r["info"].get("guidance") == "oracle"]
    assert len(guided) == 4  # 2 steps x 2 rounds
    sizes = Counter(r["group_id"] for r in records)
    assert set(sizes.values()) == {3}  # the oracle replaced a rollout: groups keep G
    for g in guided:
        assert g["reward_components"]["outcome"] == 1.0 and g["advantage"] > 0
        others = [r for r in records if r["group_id"] == g["group_id"] and r is not g]
        assert all(r["seed"] == g["seed"] and r["advantage"] < 0 for r in others)
        sampled = [lp for lp, m in zip(g["logprobs"], g["loss_mask"]) if m]
        assert sampled and all(lp < 0.0 for lp in sampled)
