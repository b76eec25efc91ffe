"""``agentic-rl eval`` on a base model and on a trained run/checkpoint (tiny random Llama):
the table prints, the JSON report matches the training run's own held-out evaluation."""

from __future__ import annotations

import json

import pytest

from agentic_rl.cli import main
from agentic_rl.config import load_config
from agentic_rl.trainer.recipe import train
from tests.recipe_settings import SIMPLE_SAMPLING


def _overrides(model_dir, out):
    return [
        f"model.path='{model_dir}'",
        "model.num_threads=1",
        "algorithm.steps=1",
        *SIMPLE_SAMPLING,
        "algorithm.tasks_per_step=1",
        "algorithm.group_size=2",
        "warmup.num_demos=2",
        "warmup.batch_size=2",
        "eval.size=3",
        "eval.base=false",
        "checkpoint_every=1",
        f"output_dir='{out}'",
        "rollout.max_new_tokens=48",
    ]


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
    final = [
        r
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if r.get("tag") == "final"
    ][0]
    by_run = _eval(capsys, ["eval", *sets, "--model", str(run_dir), "--json"])
    assert by_run["success"] == summary["success"]["final"] == final["eval/success"]
    assert by_run["episodes"] == by_run["tasks"] == 3
    assert by_run["reward_components"]["correct_answer"] == pytest.approx(
        final["eval/reward/correct_answer"]
    )
    assert by_run["turns_mean"] == pytest.approx(final["eval/turns"])
    checkpoint = run_dir / "checkpoints" / "step-000001"
    by_checkpoint = _eval(capsys, ["eval", *sets, "--model", str(checkpoint), "--json"])
    assert by_checkpoint["success"] == by_run["success"]
    assert by_checkpoint["cost"]["generated_tokens"] == by_run["cost"]["generated_tokens"]


def test_eval_table_pass_at_k_and_json_file(trained, tiny_model_dir, capsys, tmp_path):
    _, overrides = trained
    sets = [a for o in overrides for a in ("--set", o)]
    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                *sets,
                "--model",
                str(tiny_model_dir),
                "--env",
                "calculator-v0",
                "--episodes",
                "2",
                "--k",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    for metric in (
        "success",
        "pass@1",
        "pass@2",
        "return_mean",
        "cost/tool_calls",
        "risk_incidents/events",
        "turns_mean",
        "stop_reasons/",
    ):
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


# -- corrupted run files: one error line naming the file, exit 2 --------------------------


def _error_line(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


@pytest.fixture(scope="module")
def small_run(tiny_model_dir, tmp_path_factory):
    """A real run of the tiny model: one RL step (checkpointed) and the final eval, no warm-up."""
    out = tmp_path_factory.mktemp("corrupt-runs")
    return train(
        load_config(
            None,
            [
                f"model.path='{tiny_model_dir}'",
                "model.num_threads=1",
                "warmup.enabled=false",
                "eval.base=false",
                "eval.size=1",
                "algorithm.steps=1",
                *SIMPLE_SAMPLING,
                "algorithm.tasks_per_step=1",
                "algorithm.group_size=2",
                "checkpoint_every=1",
                "rollout.max_new_tokens=12",
                "rollout.max_turns=2",
                f"output_dir='{out}'",
            ],
        )
    )


@pytest.fixture
def run_copy(small_run, tmp_path):
    import shutil

    return shutil.copytree(small_run, tmp_path / "run")


def _truncate(path, keep: int = 100) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:keep])


@pytest.mark.parametrize("name", ["trainable.safetensors", "trainer_state.pt"])
def test_truncated_checkpoint_on_resume_and_eval(run_copy, capsys, name):
    checkpoint = run_copy / "checkpoints" / "step-000001"
    _truncate(checkpoint / name)
    line = _error_line(capsys, ["train", "--resume", str(run_copy)])
    assert str(checkpoint / name) in line and "corrupt" in line
    if name == "trainable.safetensors":  # eval reads only the weights of a checkpoint
        line = _error_line(capsys, ["eval", "--model", str(checkpoint), "--episodes", "1"])
        assert str(checkpoint / name) in line


def test_resume_refuses_a_pickle_that_is_not_plain_data(run_copy, capsys):
    """trainer_state.pt is loaded weights-only: a pickled object (code on load) is refused."""
    import torch

    path = run_copy / "checkpoints" / "step-000001" / "trainer_state.pt"
    blob = torch.load(path, weights_only=True)
    blob["extra"] = PickledObject()  # unpickling it would import and build an arbitrary class
    torch.save(blob, path)
    line = _error_line(capsys, ["train", "--resume", str(run_copy)])
    assert str(path) in line and "weights-only" in line


class PickledObject:
    """Stands for any class a malicious pickle could name."""


def test_truncated_final_model_on_eval(run_copy, capsys):
    weights = run_copy / "final_model" / "model.safetensors"
    _truncate(weights)
    line = _error_line(capsys, ["eval", "--model", str(run_copy), "--episodes", "1"])
    assert str(run_copy / "final_model") in line


def _corrupt_shard(shard, how: str) -> None:
    if how == "truncated":
        _truncate(shard, shard.stat().st_size // 2)
    elif how == "zero-byte":
        shard.write_bytes(b"")
    elif how == "bit-flipped":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x10
        shard.write_bytes(bytes(data))
    else:
        shard.unlink()


@pytest.mark.parametrize("how", ["truncated", "zero-byte", "bit-flipped", "deleted"])
def test_corrupt_or_missing_shard_in_view_replay_export(run_copy, capsys, tmp_path, how):
    shards = sorted((run_copy / "trajectories").glob("part-*.parquet"))
    assert len(shards) == 2  # the RL step, the final eval: one shard each
    shard = shards[0]
    _corrupt_shard(shard, how)
    for argv in (
        ["view", str(run_copy), "--no-tokens"],
        ["replay", str(run_copy), "--trajectory", "x"],
        ["export", str(run_copy), "--out", str(tmp_path / "ds")],
    ):
        line = _error_line(capsys, argv)
        assert str(shard) in line, line
        assert ("missing" if how == "deleted" else "corrupt") in line
