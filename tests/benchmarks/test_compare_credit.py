"""benchmarks/compare_credit.py end to end on the tiny random Llama with a trivially small budget:
a shared warm-up per env, every method stopped by the time budget, table, curves, results."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.recipe_settings import SIMPLE_SAMPLING

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compare_credit.py"


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("compare_credit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_credit_tiny(compare, tiny_model_dir, tmp_path):
    out = tmp_path / "cmp"
    # 128 tokens: a reply cut by the budget ends the episode, and search-qa's oracle replies need the room
    sets = [
        "model.num_threads=1",
        "rollout.max_new_tokens=128",
        "rollout.max_turns=4",
        "warmup.num_demos=2",
        *SIMPLE_SAMPLING,
        "warmup.batch_size=2",
        "algorithm.tasks_per_step=1",
        "algorithm.group_size=2",
    ]
    argv = [
        "--out",
        str(out),
        "--model",
        str(tiny_model_dir),
        "--budget-s",
        "0.01",
        "--eval-size",
        "1",
        "--eval-every",
        "1",
        "--envs",
        "calculator-v0",
        "search-qa-v0",
        "--algorithms",
        "grpo",
        "ppo",
    ]
    results = compare.main(argv + [a for s in sets for a in ("--set", s)])
    for env_id in ("calculator-v0", "search-qa-v0"):
        for name in ("grpo", "ppo"):
            r = results["envs"][env_id][name]
            # a budget below one step's time: exactly one RL step, then the final eval
            assert r["rl_steps"] == 1 and r["rl_seconds"] > 0.01
            assert [e["rl_step"] for e in r["evals"]] == [0, 1]  # warm-up start, final
            assert r["start_success"] is not None and r["final_success"] is not None
            assert Path(r["run_dir"]).name == name
    # same start model, same per-episode seeds: the first step's rollouts are token-identical
    assert results["envs"]["calculator-v0"]["ppo"]["identical_to_first"] == {1: 1.0}
    assert "identical_to_first" not in results["envs"]["calculator-v0"]["grpo"]
    table = (out / "table.md").read_text()
    assert table.count("| search-qa-v0 |") == 2 and "| calculator-v0 | ppo | 1 |" in table
    assert (out / "curves.png").stat().st_size > 1000
    assert json.loads((out / "results.json").read_text())["budget_s"] == 0.01

    # a second comparison reuses that warm-up: same start model, same start point, no new warm-up run
    again = compare.main(
        [
            "--out",
            str(tmp_path / "again"),
            "--warmup-from",
            str(out),
            "--budget-s",
            "0.01",
            "--eval-size",
            "1",
            "--envs",
            "calculator-v0",
            "--algorithms",
            "grpo",
        ]
        + [a for s in sets for a in ("--set", s)]
    )
    r = again["envs"]["calculator-v0"]["grpo"]
    assert r["start_success"] == results["envs"]["calculator-v0"]["grpo"]["start_success"]
    assert r["rl_steps"] == 1 and not (tmp_path / "again" / "calculator-v0" / "warmup").exists()
    assert (
        "warmup/start_model"
        in (tmp_path / "again" / "calculator-v0" / "grpo" / "config.toml").read_text()
    )


def test_warmup_from_a_folder_without_warmup_fails_clearly(compare, tmp_path):
    with pytest.raises(FileNotFoundError, match="no warm-up model"):
        compare.reuse_warm_start(tmp_path / "calculator-v0")


def test_bad_budget_is_rejected(compare):
    with pytest.raises(SystemExit):
        compare.parse_args(["--out", "x", "--budget-s", "0"])
    with pytest.raises(SystemExit):
        compare.parse_args(["--out", "x", "--warmup-from", "y", "--no-warmup"])
