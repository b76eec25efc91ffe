"""What a run's report is made of, read from the run directory (no HTML, no plots).

``metrics.jsonl`` rows (:func:`load_metrics`), held-out outcomes and success counts per eval tag
from the trajectory store (:func:`eval_outcomes`, :func:`eval_counts`) and per-RL-step rows of
stop reasons, tool calls and lengths (:func:`store_rows`). :mod:`agentic_rl.trainer.records.report`
renders them; ``benchmarks/learning.py`` reads the outcomes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: one ``metrics.jsonl`` row (or a computed row): metric key -> value
Row = dict[str, Any]


def as_number(value: Any) -> float | None:
    """``value`` as a float, or None when it is not a number (bools count as 0/1)."""
    if isinstance(value, (int, float)):
        return float(value)
    return None


def load_metrics(path: Path) -> list[Row]:
    """Read a ``metrics.jsonl`` file; a missing file gives [], bad lines are skipped.

    Raises:
        OSError: the file exists but cannot be read.
    """
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                logger.warning("%s:%d: skipping a line that is not JSON", path, number)
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


#: tag -> {held-out task seed -> (level or None, success)}
EvalOutcomes = dict[str, dict[int, tuple[str | None, bool]]]


def eval_outcomes(run_dir: Path, env_id: str | None = None) -> EvalOutcomes:
    """Per-task held-out outcomes by eval tag (in evaluation order) from ``RUN_DIR/trajectories/``.

    Success is :func:`agentic_rl.trainer.evaluation.held_out.is_success` and not ``failed`` (as in
    :func:`~agentic_rl.trainer.evaluation.held_out.summarize`); the level is the trajectory info's
    ``level`` (None when absent). A task evaluated twice under one tag (a resumed run) keeps
    its last record. No store gives {}.

    Args:
        env_id: only this env's records. A mixture run's envs play the same held-out seeds, so
            its outcomes are read one env at a time (tasks are keyed by seed).
    """
    from agentic_rl.trainer.evaluation.held_out import is_success
    from agentic_rl.trajectories import RUN_STORE_DIRNAME, TrajectoryStore, trajectory_from_record

    path = Path(run_dir) / RUN_STORE_DIRNAME
    if not path.is_dir():
        return {}
    outcomes: EvalOutcomes = {}
    where = {"phase": "eval"} if env_id is None else {"phase": "eval", "env_id": env_id}
    for record in TrajectoryStore(path, read_only=True).read(**where):
        t = trajectory_from_record(record)
        outcomes.setdefault(str(record.get("tag")), {})[t.seed] = (
            t.level,
            is_success(t) and not t.failed,
        )
    return outcomes


#: tag -> {"eval/success" or "eval/success/<level>": (successes, n)}
EvalCounts = dict[str, dict[str, tuple[int, int]]]


def eval_counts(run_dir: Path) -> EvalCounts:
    """Successes and tasks per eval tag, overall (``eval/success``) and per level
    (``eval/success/<level>``): the metric keys of the eval rows. From :func:`eval_outcomes`;
    when ``config.toml`` has ``eval.size``, the entry ``"*": {"eval/success": (-1, size)}`` gives
    the overall n of any tag missing from the store (its successes come from the row's rate).
    A mixture run (:func:`mixture_env_ids`) has each env's ``eval/<env id>/success`` and
    ``eval/<env id>/success/<level>`` instead of levels, and the pooled ``eval/success``."""
    envs = mixture_env_ids(run_dir)
    if envs:
        return _mixture_counts(run_dir, envs)
    counts: EvalCounts = {}
    for tag, tasks in eval_outcomes(run_dir).items():
        cells = counts.setdefault(
            tag, {"eval/success": (sum(ok for _, ok in tasks.values()), len(tasks))}
        )
        for level in {lv for lv, _ in tasks.values() if lv is not None}:
            items = [ok for lv, ok in tasks.values() if lv == level]
            cells[f"eval/success/{level}"] = (sum(items), len(items))
    size = _eval_size(run_dir / "config.toml")
    if size:
        counts.setdefault("*", {"eval/success": (-1, size)})  # any tag: n only
    return counts


def mixture_env_ids(run_dir: Path) -> list[str]:
    """The env ids of a mixture run's ``[[env.mix]]`` (from ``config.toml``); [] otherwise."""
    import tomllib

    try:
        mix = tomllib.loads((Path(run_dir) / "config.toml").read_text(encoding="utf-8"))
        mix = mix.get("env", {}).get("mix", [])
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(mix, list):
        return []
    return [e["id"] for e in mix if isinstance(e, dict) and isinstance(e.get("id"), str)]


def _mixture_counts(run_dir: Path, envs: list[str]) -> EvalCounts:
    """:func:`eval_counts` of a mixture run: per env and level, and pooled over the envs."""
    counts: EvalCounts = {}
    for env in envs:
        for tag, tasks in eval_outcomes(run_dir, env_id=env).items():
            cells = counts.setdefault(tag, {})
            k, n = sum(ok for _, ok in tasks.values()), len(tasks)
            cells[f"eval/{env}/success"] = (k, n)
            pk, pn = cells.get("eval/success", (0, 0))
            cells["eval/success"] = (pk + k, pn + n)
            for level in {lv for lv, _ in tasks.values() if lv is not None}:
                items = [ok for lv, ok in tasks.values() if lv == level]
                cells[f"eval/{env}/success/{level}"] = (sum(items), len(items))
    return counts


def _eval_size(path: Path) -> int | None:
    """``[eval] size`` of a resolved config file, or None."""
    import tomllib

    try:
        size = tomllib.loads(path.read_text(encoding="utf-8")).get("eval", {}).get("size")
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) and size > 0 else None


def store_rows(run_dir: Path) -> list[Row]:
    """Per-RL-step rows computed from the trajectory store (``RUN_DIR/trajectories/``).

    Each row has ``step`` and: ``stop/<reason>`` (fraction of the step's episodes ending so),
    ``tools/calls_per_episode``, ``tools/error_rate`` (failed tool results / all results),
    ``length/generated_tokens`` and ``length/total_tokens`` (means per episode). No store
    gives [].
    """
    from agentic_rl.trajectories import RUN_STORE_DIRNAME, TrajectoryStore

    path = Path(run_dir) / RUN_STORE_DIRNAME
    if not path.is_dir():
        return []
    records = TrajectoryStore(path, read_only=True).read(phase="rl")
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_step.setdefault(int(r.get("step") or 0), []).append(r)
    rows = []
    for step, items in sorted(by_step.items()):
        n = len(items)
        results = [res for r in items for t in r["turns"] for res in t["tool_results"]]
        row: Row = {"step": step}
        for reason in sorted({r["stop_reason"] for r in items}):
            row[f"stop/{reason}"] = sum(r["stop_reason"] == reason for r in items) / n
        row["tools/calls_per_episode"] = (
            sum(len(t["action"]["tool_calls"]) for r in items for t in r["turns"]) / n
        )
        row["tools/error_rate"] = (
            sum(not res["ok"] for res in results) / len(results) if results else 0.0
        )
        row["length/generated_tokens"] = sum(sum(r["loss_mask"]) for r in items) / n
        row["length/total_tokens"] = sum(len(r["token_ids"]) for r in items) / n
        rows.append(row)
    return rows
