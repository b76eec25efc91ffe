"""Experiment tracking: every metrics row also goes to TensorBoard (``RUN_DIR/tb/``, on by
default) and, when ``[tracking]`` turns them on, to an offline W&B run and a local MLflow store.

:class:`TrackedMetricsLog` is the run's :class:`~agentic_rl.trainer.records.run_dir.MetricsLog`
(``metrics.jsonl`` stays the source of truth) that forwards each row to its sinks.
:class:`TensorBoardSink` writes each numeric value of a row as a scalar with
``torch.utils.tensorboard.SummaryWriter`` and flushes after every row, so a killed run keeps
everything it logged. Tags are the metric names (``rollout/reward_total``, ``train/kl``,
``eval/success``, ...) at the row's ``step``; warm-up rows are prefixed ``warmup/`` so their
``train/loss`` does not mix with RL's. View with ``tensorboard --logdir RUN_DIR/tb``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

from agentic_rl.trainer.records.run_dir import MetricsLog

#: row keys that index a row rather than measure something
_INDEX_KEYS = frozenset({"phase", "step", "rl_step", "tag"})


class Sink(Protocol):
    """Receives every metrics row (see :class:`TrackedMetricsLog`)."""

    def log(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The TensorBoard scalars of a metrics row: ``{tag: value}`` for finite numeric values.

    Index keys (phase, step, rl_step, tag) and non-numbers (bools included) are dropped;
    warm-up rows get a ``warmup/`` prefix.
    """
    prefix = "warmup/" if row.get("phase") == "warmup" else ""
    out = {}
    for key, value in row.items():
        if key in _INDEX_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[prefix + key] = float(value)
    return out


class TensorBoardSink:
    """Writes rows as TensorBoard scalars under ``logdir`` (created)."""

    def __init__(self, logdir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir))

    def log(self, row: dict[str, Any]) -> None:
        """Add the row's :func:`scalars` at ``row["step"]`` (0 when absent) and flush."""
        step = int(row.get("step") or 0)
        for tag, value in scalars(row).items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


class TrackedMetricsLog(MetricsLog):
    """A :class:`MetricsLog` that also sends every row to ``sinks`` (after it is on disk)."""

    def __init__(self, path: Path, sinks: list[Sink] | None = None) -> None:
        super().__init__(path)
        self.sinks = list(sinks or [])

    def write(self, row: dict[str, Any]) -> None:
        """Append ``row`` to the JSONL file, then log it to each sink."""
        super().write(row)
        for sink in self.sinks:
            sink.log(row)

    def close(self) -> None:
        """Close every sink."""
        for sink in self.sinks:
            sink.close()


class WandbSink:
    """An offline Weights & Biases run in ``RUN_DIR/wandb/`` (``pip install agentic-rl[tracking]``).

    Nothing leaves the machine; upload later with ``wandb sync RUN_DIR/wandb/offline-run-*``.
    Rows are logged with their step as the ``trainer/step`` metric (W&B's own step must only
    grow, while warm-up, eval and RL rows each count from their own start).
    """

    def __init__(
        self, run_dir: str | Path, name: str, config: dict[str, Any] | None = None
    ) -> None:
        import wandb

        self.run = wandb.init(
            mode="offline", dir=str(run_dir), project="agentic-rl", name=name, config=config or {}
        )
        self.run.define_metric("trainer/step")
        self.run.define_metric("*", step_metric="trainer/step")

    def log(self, row: dict[str, Any]) -> None:
        """Log the row's :func:`scalars` with ``trainer/step`` = ``row["step"]``."""
        self.run.log({"trainer/step": int(row.get("step") or 0), **scalars(row)})

    def close(self) -> None:
        """Finish the run (its files stay in ``RUN_DIR/wandb/``)."""
        self.run.finish()


class MlflowSink:
    """An MLflow run in a local file store ``RUN_DIR/mlruns/`` (``pip install agentic-rl[tracking]``).

    View with ``mlflow ui --backend-store-uri RUN_DIR/mlruns``. MLflow 3 keeps the file store
    in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``; it is set here because the file store
    is the only backend that needs neither a server nor SQLAlchemy.
    """

    def __init__(self, run_dir: str | Path, name: str) -> None:
        import os

        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=(Path(run_dir) / "mlruns").resolve().as_uri())
        experiment = self.client.get_experiment_by_name("agentic-rl")
        exp_id = (
            experiment.experiment_id if experiment else self.client.create_experiment("agentic-rl")
        )
        self.run_id = self.client.create_run(exp_id, run_name=name).info.run_id

    def log(self, row: dict[str, Any]) -> None:
        """Log the row's :func:`scalars` at ``row["step"]`` (MLflow metric names allow ``/``)."""
        import time

        from mlflow.entities import Metric

        step, now = int(row.get("step") or 0), int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in scalars(row).items()]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        """Mark the run finished."""
        self.client.set_terminated(self.run_id)


def run_metrics_log(
    run_dir: Path, tracking: Any = None, *, config: dict[str, Any] | None = None
) -> TrackedMetricsLog:
    """The metrics log of a run: ``RUN_DIR/metrics.jsonl`` plus the sinks ``tracking`` turns on.

    Args:
        run_dir: the run directory.
        tracking: a :class:`~agentic_rl.config.TrackingConfig` (None: its defaults, TensorBoard only).
        config: the run's resolved config as a dict, recorded by W&B.

    Raises:
        ImportError: W&B or MLflow is turned on but not installed (``agentic-rl[tracking]``).
    """
    run_dir = Path(run_dir)
    on = {
        name: getattr(tracking, name, default)
        for name, default in (("tensorboard", True), ("wandb", False), ("mlflow", False))
    }
    sinks: list[Sink] = []
    if on["tensorboard"]:
        sinks.append(TensorBoardSink(run_dir / "tb"))
    if on["wandb"]:
        sinks.append(WandbSink(run_dir, run_dir.name, config))
    if on["mlflow"]:
        sinks.append(MlflowSink(run_dir, run_dir.name))
    return TrackedMetricsLog(run_dir / "metrics.jsonl", sinks)
