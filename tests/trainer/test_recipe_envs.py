"""`agentic-rl train --env ID` with the default recipe: a 2-step smoke run per new env (tiny model)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentic_rl.cli.main import env_overrides, main
from agentic_rl.config import load_config
from agentic_rl.trainer.records.run_dir import MetricsLog
from tests.recipe_settings import SIMPLE_SAMPLING

SMOKE = [
    "model.num_threads=1",
    "warmup.num_demos=3",
    "warmup.batch_size=3",
    "algorithm.steps=2",
    *SIMPLE_SAMPLING,
    "algorithm.tasks_per_step=2",
    "algorithm.group_size=2",
    "eval.size=3",
    "eval.base=false",
    "rollout.max_new_tokens=96",  # the env's own default (128) is kept unless set; smaller is faster
]


def testenv_overrides_replace_calculator_defaults_unless_the_user_sets_them():
    config = load_config(None, env_overrides("math-python-v0", []))
    assert config.env.id == "math-python-v0" and config.name == "math-python-v0-grpo"
    assert config.warmup.env_kwargs == {} and config.rollout.max_new_tokens == 128
    config = load_config(
        None, env_overrides("rg/countdown-v0", ["rollout.max_new_tokens=64", "name='mine'"])
    )
    assert (
        config.name == "mine"
        and config.rollout.max_new_tokens == 64
        and config.env.id == "rg/countdown-v0"
    )
    config = load_config(None, env_overrides("calculator-v0", []))
    assert config.warmup.env_kwargs == {"levels": ["direct"]}  # the default env keeps its defaults


def test_env_id_from_set_or_a_file_takes_the_env_recipe_too(tiny_model_dir, tmp_path):
    """Issue 39, item 3: ``--set env.id=frozenlake-v0`` (or ``id`` in a file) used to keep the
    calculator's warm-up level and fail with "unexpected keyword argument 'levels'", a key the
    user never set. The env's recipe fills every key the user leaves unset; set keys win."""
    from agentic_rl.config import load_run_config, save_config
    from agentic_rl.trainer.run import validate

    by_flag = load_config(None, env_overrides("frozenlake-v0", []))
    by_set = load_config(None, ["env.id=frozenlake-v0"])
    assert by_set == by_flag and by_set.warmup.env_kwargs == {}
    assert by_set.name == "frozenlake-v0-grpo" and by_set.env.kwargs["describe_neighbours"]
    path = tmp_path / "lake.toml"
    path.write_text('name = "mine"\n[env]\nid = "frozenlake-v0"\n[rollout]\nmax_turns = 5\n')
    by_file = load_config(path, ["env.kwargs.keep_history=false"])
    assert (by_file.name, by_file.rollout.max_turns) == ("mine", 5)  # the user's keys win
    assert by_file.rollout.max_new_tokens == by_flag.rollout.max_new_tokens  # the recipe's
    assert by_file.env.kwargs == {**by_flag.env.kwargs, "keep_history": False}
    validate(load_config(None, ["env.id=frozenlake-v0", f"model.path='{tiny_model_dir}'"]))
    save_config(by_file, tmp_path / "config.toml")  # a saved run keeps what it ran with
    assert load_run_config(tmp_path / "config.toml") == by_file
    assert load_config(None, ["env.id=nope-v0"]).env.id == "nope-v0"  # validate() names it


def test_train_env_unknown_id_is_one_error_line(capsys):
    assert main(["train", "--env", "rg/nope-v0"]) == 2
    assert "unknown env id 'rg/nope-v0'" in capsys.readouterr().err


@pytest.mark.parametrize("env_id", ["math-python-v0", "rg/countdown-v0"])
def test_train_env_two_step_smoke_run(env_id, tiny_model_dir, tmp_path):
    sets = [f"model.path='{tiny_model_dir}'", f"output_dir='{tmp_path}'", *SMOKE]
    argv = ["train", "--env", env_id]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 0
    run_dir = next(p for p in Path(tmp_path).iterdir() if p.is_dir())
    assert run_dir.name == env_id.replace("/", "-") + "-grpo"
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(
        math.isfinite(r["train/loss"]) for r in warmup
    )  # oracle demos fit and were trained on
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0
        assert "rollout/reward/correct_answer" in r and "rollout/reward/task_score" in r
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["success"]) == {"warmup", "final"}
