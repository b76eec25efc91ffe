"""The training recipe on a text game: a 2-step smoke run of ``train --env frozenlake-v0`` with the tiny model."""

from __future__ import annotations

import math

from agentic_rl.cli.main import env_overrides
from agentic_rl.config import load_config
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.run_dir import MetricsLog
from tests.recipe_settings import TWO_STEP_SMOKE


def test_frozenlake_two_step_smoke_run(tiny_model_dir, tmp_path):
    # the game's own recipe defaults (budgets, no calculator warm-up levels), then small sizes
    config = load_config(
        None,
        env_overrides(
            "frozenlake-v0",
            [
                f"model.path='{tiny_model_dir}'",
                *TWO_STEP_SMOKE,
                "rollout.max_turns=8",
                "rollout.max_new_tokens=12",
                f"output_dir='{tmp_path}'",
            ],
        ),
    )
    assert config.env.id == "frozenlake-v0" and config.warmup.env_kwargs == {}
    # the shipped frozenlake recipe: neighbour line, one short context per turn
    assert config.env.kwargs == {"describe_neighbours": True, "keep_history": False}
    assert config.algorithm.steps == 2 and config.warmup.num_demos == 2  # the test's sizes win
    run_dir = train(config)
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(
        math.isfinite(r["train/loss"]) for r in warmup
    )  # oracle demos won and were trained on
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0
        assert "rollout/reward/game_won" in r and "rollout/reward/valid_actions" in r
        assert 1.0 <= r["rollout/turns"] <= 8.0
    assert [r["tag"] for r in rows if r["phase"] == "eval"] == ["warmup", "final"]
