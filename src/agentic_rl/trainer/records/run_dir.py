"""The run directory: ``runs/<name>/`` with config, metrics, trajectories, checkpoints, report.

* ``config.toml``: the resolved config.
* ``metrics.jsonl``: one JSON object per line: ``{"phase": "warmup"|"rl"|"eval", "step": …,
  "rl_step": …, <namespaced metrics>}``.
* ``trajectories/``: every trajectory (token ids, loss mask, logprobs, messages, reward
  components, advantage, stop reason, env kwargs), one Parquet shard per batch, append-only
  and crash-safe (:class:`~agentic_rl.trajectories.TrajectoryStore`).
* ``checkpoints/``, ``final_model/`` (a HF model directory), ``summary.json``, ``report.html``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from agentic_rl.trajectories import RUN_STORE_DIRNAME, TrajectoryStore


def new_run_dir(output_dir: str, name: str) -> Path:
    """Create ``output_dir/name`` (or ``name-2``, ``name-3``… if taken) and return it.

    Raises:
        ConfigError: ``output_dir`` exists and is not a directory, or the run directory cannot
            be created there (no permission, read-only file system, ...).
    """
    from agentic_rl.errors import ConfigError

    root = Path(output_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"output_dir is not a directory: {output_dir}") from None
    except OSError as exc:
        raise ConfigError(f"cannot create output_dir {output_dir}: {exc.strerror or exc}") from None
    candidate, k = root / name, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            k += 1
            candidate = root / f"{name}-{k}"
        except OSError as exc:
            raise ConfigError(
                f"cannot create a run directory in output_dir {output_dir}: {exc.strerror or exc}"
            ) from None


def start_line(config: Any, run_dir: Path, *, resumed: bool = False, device: str = "") -> str:
    """The first line a run prints (``agentic-rl train``): what it trains, on which env and
    model, and where; when ``config.name`` was taken (so :func:`new_run_dir` chose ``NAME-2``,
    …) it says so.

    Args:
        config: the run's :class:`~agentic_rl.config.TrainConfig`.
        run_dir: its run directory. resumed: the run continues from a checkpoint.
        device: where the model runs, in words (empty: not said).
    """
    mix = getattr(config.env, "mix", ())
    envs = " + ".join(e.id for e in mix) if mix else config.env.id  # a mixture's envs
    line = (
        f"{'resuming' if resumed else 'training'} {run_dir.name} on {envs} "
        f"with model {config.model.path}{f' on {device}' if device else ''} in {run_dir}"
    )
    if not resumed and run_dir.name != config.name:
        taken = Path(config.output_dir) / config.name
        line += f" ({taken} exists, so this run is {run_dir.name})"
    return line


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Append-only JSONL metrics file (each row flushed and fsynced)."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, row: dict[str, Any]) -> None:
        """Append one row (non-finite floats are written as null)."""
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def rows(self) -> list[dict[str, Any]]:
        """All complete rows (a torn last line is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out


def _after(row: dict[str, Any], rl_step: int) -> bool:
    return (
        row.get("phase") in ("rl", "eval")
        and int(row.get("rl_step", 0)) > rl_step
        or row.get("tag") == "final"
    )


def truncate_after(run_dir: Path, rl_step: int) -> None:
    """Drop metric rows and trajectories logged after RL step ``rl_step`` (before a resume)."""
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    kept = [r for r in metrics.rows() if not _after(r, rl_step)]
    tmp = run_dir / "metrics.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    os.replace(tmp, metrics.path)
    path = run_dir / RUN_STORE_DIRNAME
    if path.is_dir():
        TrajectoryStore(path).delete_where(lambda r: _after(r, rl_step))
