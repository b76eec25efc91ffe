"""The training recipe on memory-recall-v0: a 2-step smoke run with the tiny model."""

from __future__ import annotations

import math

from agentic_rl.cli.main import env_overrides
from agentic_rl.config import load_config
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trajectories import RUN_STORE_DIRNAME, TrajectoryStore
from tests.recipe_settings import TWO_STEP_SMOKE


def test_memory_recall_two_step_smoke_run(tiny_model_dir, tmp_path):
    # exactly what `agentic-rl train --env memory-recall-v0 --set ...` loads
    config = load_config(
        None,
        env_overrides(
            "memory-recall-v0",
            [
                f"model.path='{tiny_model_dir}'",
                *TWO_STEP_SMOKE,
                f"output_dir='{tmp_path}'",
            ],
        ),
    )
    assert (config.env.id, config.name, config.warmup.env_kwargs) == (
        "memory-recall-v0",
        "memory-recall-v0-grpo",
        {},
    )
    assert config.rollout.max_new_tokens == 64
    run_dir = train(config)
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(math.isfinite(r["train/loss"]) for r in warmup)  # oracle demos succeeded
    demos = list(
        TrajectoryStore(run_dir / RUN_STORE_DIRNAME, read_only=True).read_trajectories(
            phase="warmup"
        )
    )
    assert len(demos) == 2 and all(t.reward_components["memory_writes"] == 1.0 for t in demos)
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0
        for name in (
            "correct_answers",
            "memory_ops",
            "unused_writes",
            "memory_writes",
            "memory_reads",
            "memory_hit_rate",
            "memory_tokens",
        ):
            assert f"rollout/reward/{name}" in r, name
    assert [r["tag"] for r in rows if r["phase"] == "eval"] == ["warmup", "final"]
