"""Experiment tracking: every metrics row also goes to TensorBoard (``RUN_DIR/tb/``).

:class:`TrackedMetricsLog` is the run's :class:`~agentic_rl.trainer.run_dir.MetricsLog`
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

from agentic_rl.trainer.run_dir import MetricsLog

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


def run_metrics_log(run_dir: Path, *, tensorboard: bool = True) -> TrackedMetricsLog:
    """The metrics log of a run: ``RUN_DIR/metrics.jsonl``, plus TensorBoard in ``RUN_DIR/tb/``."""
    sinks: list[Sink] = [TensorBoardSink(Path(run_dir) / "tb")] if tensorboard else []
    return TrackedMetricsLog(Path(run_dir) / "metrics.jsonl", sinks)
