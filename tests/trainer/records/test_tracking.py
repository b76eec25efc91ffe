"""TensorBoard tracking: rows become scalars at their step; the JSONL file stays the source of truth."""

from __future__ import annotations

import math

import pytest

from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trainer.records.tracking import run_metrics_log, scalars


def test_scalars_drop_index_keys_and_non_numbers():
    row = {
        "phase": "rl",
        "step": 3,
        "rl_step": 3,
        "tag": "x",
        "rollout/success": 0.5,
        "train/kl": 1,
        "flag": True,
        "text": "no",
        "bad": math.nan,
    }
    assert scalars(row) == {"rollout/success": 0.5, "train/kl": 1.0}
    assert scalars({"phase": "warmup", "step": 1, "train/loss": 2.0}) == {"warmup/train/loss": 2.0}


def test_rows_reach_tensorboard_and_jsonl(tmp_path):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    log = run_metrics_log(tmp_path)
    log.write({"phase": "warmup", "step": 1, "train/loss": 2.5})
    log.write({"phase": "rl", "step": 1, "train/loss": 0.25, "rollout/success": 0.0})
    log.write({"phase": "rl", "step": 2, "train/loss": 0.125, "rollout/success": 0.5})
    # no close(): every row is flushed, as for a run that gets killed
    acc = ea.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"warmup/train/loss", "train/loss", "rollout/success"}
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(1, 0.25), (2, 0.125)]
    assert [(e.step, e.value) for e in acc.Scalars("warmup/train/loss")] == [(1, 2.5)]
    assert len(MetricsLog(tmp_path / "metrics.jsonl").rows()) == 3
    log.close()


def test_tensorboard_can_be_off(tmp_path):
    from agentic_rl.config import load_config

    log = run_metrics_log(tmp_path, load_config(None, ["tracking.tensorboard=false"]).tracking)
    log.write({"phase": "rl", "step": 1, "x": 1.0})
    assert not (tmp_path / "tb").exists() and len(log.rows()) == 1


ROWS = [
    {"phase": "warmup", "step": 1, "train/loss": 2.5},
    {"phase": "rl", "step": 1, "train/loss": 0.25},
    {"phase": "rl", "step": 2, "train/loss": 0.125},
]


def test_offline_wandb_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from agentic_rl.config import load_config

    monkeypatch.setenv("WANDB_SILENT", "true")
    tracking = load_config(None, ["tracking.wandb=true", "tracking.tensorboard=false"]).tracking
    log = run_metrics_log(tmp_path, tracking, config={"seed": 0})
    for row in ROWS:
        log.write(row)
    log.close()
    [run_folder] = (tmp_path / "wandb").glob("offline-run-*")
    [data] = run_folder.glob("run-*.wandb")
    assert data.stat().st_size > 0  # the offline run's records, for `wandb sync`


def test_mlflow_file_store(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    from agentic_rl.config import load_config

    tracking = load_config(None, ["tracking.mlflow=true", "tracking.tensorboard=false"]).tracking
    log = run_metrics_log(tmp_path, tracking)
    for row in ROWS:
        log.write(row)
    log.close()
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("agentic-rl").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    assert [
        (m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss")
    ] == [(1, 0.25), (2, 0.125)]
    assert [
        (m.step, m.value) for m in client.get_metric_history(run.info.run_id, "warmup/train/loss")
    ] == [(1, 2.5)]
