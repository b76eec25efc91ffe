"""Every ``algorithm.name`` through the whole recipe on the tiny random Llama (light).

The random model's replies all run to the token budget, so group rewards are equal and the
group methods' advantages are 0 here (their non-zero path is tested on hand-built trajectories
in test_credit.py); PPO's GAE advantages are not (V starts at 0 and R includes a token cost)."""

from __future__ import annotations

import math

import pytest

from agentic_rl.config import load_config
from agentic_rl.trainer.learning.credit import ALGORITHMS
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.checkpoint import latest_checkpoint
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trajectories import TrajectoryStore
from tests.recipe_settings import TWO_RL_STEPS


def _overrides(model_dir, output_dir, name: str, *extra: str) -> list[str]:
    return [
        f"model.path='{model_dir}'",
        "model.num_threads=1",
        f"output_dir='{output_dir}'",
        f"name='{name}'",
        f"algorithm.name='{name}'",
        *TWO_RL_STEPS,
        "eval.every=0",
        "rollout.max_new_tokens=12",
        "rollout.max_turns=2",
        "checkpoint_every=1",
        *extra,
    ]


def _rl_records(run_dir):
    return (
        list(TrajectoryStore(run_dir / "trajectories.jsonl").read(phase="rl"))
        if (run_dir / "trajectories.jsonl").exists()
        else list(TrajectoryStore(run_dir / "trajectories").read(phase="rl"))
    )


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_trains_and_records_its_credit(name, tiny_model_dir, tmp_path):
    extra = ("loss.kl_coef=0.05", "loss.kl_mode='reward'") if name == "reinforce_pp" else ()
    run_dir = train(load_config(None, _overrides(tiny_model_dir, tmp_path / "runs", name, *extra)))
    rl = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert math.isfinite(r["train/loss"]) and math.isfinite(r["train/grad_norm"]), r
        if name == "ppo":
            assert r["train/grad_norm"] > 0 and math.isfinite(r["train/value_loss"]), r
            assert "train/explained_variance" in r
    records = _rl_records(run_dir)
    assert len(records) == 2 * 2 * 2
    for rec in records:
        adv = rec["advantages"]
        assert len(adv["token"]) == len(rec["token_ids"]) and len(adv["turn"]) == len(rec["turns"])
        assert all(a == 0.0 for a, m in zip(adv["token"], rec["loss_mask"]) if not m)
        assert all(math.isfinite(a) for a in adv["token"] + adv["turn"])
    if name == "ppo":
        assert any(a != 0.0 for rec in records for a in rec["advantages"]["token"])
        assert (latest_checkpoint(run_dir) / "value_head.pt").is_file()


def test_unknown_algorithm_is_a_config_error(tiny_model_dir, tmp_path):
    from agentic_rl.errors import ConfigError

    with pytest.raises(ConfigError, match="algorithm.name.*gigpo"):
        train(load_config(None, _overrides(tiny_model_dir, tmp_path / "runs", "a2c")))
    with pytest.raises(ConfigError, match="loss_agg"):
        load_config(None, ["loss.loss_agg='sum'"])
