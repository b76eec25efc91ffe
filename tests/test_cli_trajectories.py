"""``agentic-rl eval`` on a base model and on a trained run/checkpoint (tiny random Llama):
the table prints, the JSON report matches the training run's own held-out evaluation."""

from __future__ import annotations

import json

import pytest

from agentic_rl.cli import main
from agentic_rl.config import load_config
from agentic_rl.trainer.recipe import train


def _overrides(model_dir, out):
    return [f"model.path='{model_dir}'", "model.num_threads=1", "algorithm.steps=1", "algorithm.tasks_per_step=1",
            "algorithm.group_size=2", "warmup.num_demos=2", "warmup.batch_size=2", "eval.size=3", "eval.base=false",
            "checkpoint_every=1", f"output_dir='{out}'", "rollout.max_new_tokens=24"]


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("evalruns")
    overrides = _overrides(tiny_model_dir, out)
    return train(load_config(None, overrides)), overrides


def _eval(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_of_trained_run_and_checkpoint_matches_training_eval(trained, capsys, tmp_path):
    run_dir, overrides = trained
    sets = [a for o in overrides for a in ("--set", o)]
    summary = json.loads((run_dir / "summary.json").read_text())
    final = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if r.get("tag") == "final"][0]
    by_run = _eval(capsys, ["eval", *sets, "--model", str(run_dir), "--json"])
    assert by_run["success"] == summary["success"]["final"] == final["eval/success"]
    assert by_run["episodes"] == by_run["tasks"] == 3
    assert by_run["reward_components"]["correct_answer"] == pytest.approx(final["eval/reward/correct_answer"])
    assert by_run["turns_mean"] == pytest.approx(final["eval/turns"])
    checkpoint = run_dir / "checkpoints" / "step-000001"
    by_checkpoint = _eval(capsys, ["eval", *sets, "--model", str(checkpoint), "--json"])
    assert by_checkpoint["success"] == by_run["success"]
    assert by_checkpoint["cost"]["generated_tokens"] == by_run["cost"]["generated_tokens"]


def test_eval_table_pass_at_k_and_json_file(trained, tiny_model_dir, capsys, tmp_path):
    _, overrides = trained
    sets = [a for o in overrides for a in ("--set", o)]
    out = tmp_path / "eval.json"
    assert main(["eval", *sets, "--model", str(tiny_model_dir), "--env", "calculator-v0", "--episodes", "2",
                 "--k", "2", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    for metric in ("success", "pass@1", "pass@2", "return_mean", "cost/tool_calls", "risk_incidents/events",
                   "turns_mean", "stop_reasons/"):
        assert metric in table
    report = json.loads(out.read_text())
    assert report["episodes"] == 4 and report["tasks"] == 2 and report["samples_per_task"] == 2
    assert 0.0 <= report["pass@1"] <= report["pass@2"] <= 1.0
    assert sum(report["stop_reasons"].values()) == 4 and report["cost"]["wall_seconds"] > 0


def test_eval_user_errors(capsys, tmp_path):
    assert main(["eval", "--env", "nope-v0"]) == 2
    assert "unknown env id" in capsys.readouterr().err
    assert main(["eval", "--k", "0"]) == 2
    assert main(["eval", "--model", str(tmp_path / "missing")]) == 2
