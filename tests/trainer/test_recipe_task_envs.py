"""``agentic-rl train --env ID`` with the default recipe on code-repair-v0 and search-qa-v0: a
2-step smoke run each with the tiny random Llama (oracle warm-up within the env's budgets,
evaluation, GRPO updates, audited tool calls)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agentic_rl.cli.main import env_overrides, main
from agentic_rl.config import load_config
from agentic_rl.tools.sandbox.bwrap import bwrap_available
from agentic_rl.trainer.records.run_dir import MetricsLog
from tests.markers import BWRAP_SKIP_REASON
from tests.recipe_settings import TWO_STEP_SMOKE

SMOKE = list(TWO_STEP_SMOKE)


def test_env_budgets_fit_the_oracles():
    config = load_config(None, env_overrides("code-repair-v0", []))
    assert config.rollout.max_new_tokens == 768 and config.warmup.env_kwargs == {}
    search = load_config(None, env_overrides("search-qa-v0", []))
    assert search.rollout.max_turns == 4
    # the lr warm-up that keeps search-qa's first RL update from breaking the tool-call format
    assert search.optim.lr_warmup_steps == 8 and load_config(None, []).optim.lr_warmup_steps == 0
    # the step count of the measured search-qa runs (docs/training_runs.md); the user's key wins
    assert search.algorithm.steps == 10
    assert (
        load_config(None, env_overrides("search-qa-v0", ["algorithm.steps=3"])).algorithm.steps == 3
    )


@pytest.mark.parametrize(
    "env_id, outcome",
    [
        pytest.param(
            "code-repair-v0",
            "hidden_tests_pass",
            marks=pytest.mark.skipif(not bwrap_available(), reason=BWRAP_SKIP_REASON),
        ),
        ("search-qa-v0", "exact_match"),
        ("research-report-v0", "coverage"),
    ],
)
def test_train_env_two_step_smoke_run(env_id, outcome, tiny_model_dir, tmp_path):
    argv = ["train", "--env", env_id]
    for item in [f"model.path='{tiny_model_dir}'", f"output_dir='{tmp_path}'", *SMOKE]:
        argv += ["--set", item]
    assert main(argv) == 0
    run_dir = next(p for p in Path(tmp_path).iterdir() if p.is_dir())
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(
        math.isfinite(r["train/loss"]) for r in warmup
    )  # the oracle's demos fit the budgets
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0 and f"rollout/reward/{outcome}" in r
    assert (
        '"decision": "allow"' in (run_dir / "audit.jsonl").read_text()
    )  # the oracle's calls were audited
