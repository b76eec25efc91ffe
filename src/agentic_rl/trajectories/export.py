"""Export stored trajectories as a Parquet dataset for SFT or offline RL.

One file ``OUT/data/train-00000-of-00001.parquet`` (HF's naming for a single-split dataset),
loadable with ``datasets.load_dataset("parquet", data_files="OUT/data/*.parquet")`` or
``datasets.load_dataset(OUT)``. Columns:

* ``messages``: list of ``{"role", "content"}``, the whole conversation in chat format (what
  TRL's ``SFTTrainer`` takes as a conversational dataset);
* ``input_ids`` (list<int32>), ``loss_mask`` (list<int8>: 1 = tokens the policy sampled),
  ``logprobs`` (list<float64>: behaviour-policy logprobs), ``advantages`` (list<float64>, per
  token, or null): the exact token stream for offline RL, no re-tokenization;
* ``reward`` (float64), ``success`` (bool: outcome group reached 1), one float64 column per
  reward component (``reward/<name>``), ``stop_reason``, ``num_turns``, ``num_tool_calls``;
* ids: ``run_id``, ``phase``, ``step``, ``env_id``, ``seed``, ``group_id``, ``trajectory_id``.

Which records: a run directory holds three phases: ``rl`` (the policy's own rollouts, plus the
oracle's episodes that off-policy guidance put into groups, marked ``info["guidance"]``),
``warmup`` (the env oracle's demonstrations) and ``eval`` (the held-out evaluation: fine-tuning on
it trains on the test set). :func:`select_records` keeps the phases asked for (``agentic-rl
export`` asks for :data:`DEFAULT_PHASES`, the RL rollouts, unless ``--phase`` says otherwise) and
counts what it kept and left out, so the command can say what the dataset holds.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentic_rl.trajectories.viewer import token_advantages

_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def record_success(record: dict[str, Any]) -> bool:
    """True when the record's outcome group reached 1 and it did not fail (the trainer's rule)."""
    failed = (
        record["stop_reason"] == "error"
        or record.get("failure") is not None
        or "failure" in record["info"]  # a record before schema version 3
    )
    return not failed and (record["reward_components"].get("outcome") or 0.0) >= 1.0 - 1e-9


#: every phase a run records
PHASES = ("rl", "warmup", "eval")
#: what ``agentic-rl export`` writes unless ``--phase`` says otherwise: the RL rollouts
DEFAULT_PHASES = ("rl",)


@dataclass(frozen=True)
class Selection:
    """The records :func:`select_records` kept, and how many of each phase it kept and left out.

    Attributes:
        rows: the kept records, in their order.
        kept: ``{phase: count}`` of ``rows`` (a record without a phase counts as ``"none"``).
        left_out: ``{phase: count}`` of the records of the other phases that passed the other
            filters (``only_success``).
        guided: how many kept ``rl`` records are the oracle's episodes put into a group by
            off-policy guidance (``info["guidance"]``), not the policy's own samples.
    """

    rows: list[dict[str, Any]]
    kept: dict[str, int]
    left_out: dict[str, int]
    guided: int


def select_records(
    records: Iterable[dict[str, Any]],
    *,
    phases: Collection[str] = DEFAULT_PHASES,
    only_success: bool = False,
) -> Selection:
    """The records of ``phases`` (and, with ``only_success``, whose :func:`record_success`
    holds), with counts per phase of what was kept and what was left out. Never raises."""
    rows: list[dict[str, Any]] = []
    kept: Counter[str] = Counter()
    left_out: Counter[str] = Counter()
    for r in records:
        if only_success and not record_success(r):
            continue
        phase = r.get("phase") or "none"
        if phase in phases:
            rows.append(r)
            kept[phase] += 1
        else:
            left_out[phase] += 1
    guided = sum(1 for r in rows if (r.get("info") or {}).get("guidance"))
    return Selection(rows, dict(kept), dict(left_out), guided)


def export_records(
    records: Iterable[dict[str, Any]], out: str | os.PathLike[str], *, only_success: bool = False
) -> Path:
    """Write the export dataset of ``records`` under ``out``; returns the Parquet file's path.

    Args:
        records: trajectory records (``TrajectoryStore.read``).
        out: the dataset folder (created; an existing export file is replaced atomically).
        only_success: keep only records for which :func:`record_success` holds.

    Raises:
        ValueError: no record is left to export.
    """
    rows = [r for r in records if not only_success or record_success(r)]
    if not rows:
        raise ValueError(
            "nothing to export: no trajectory matches"
            + (" (--only-success)" if only_success else "")
        )
    components = list(dict.fromkeys(n for r in rows for n in r["reward_components"]))
    columns: dict[str, pa.Array] = {
        "run_id": pa.array([r.get("run_id") for r in rows], pa.string()),
        "phase": pa.array([r.get("phase") for r in rows], pa.string()),
        "step": pa.array([r.get("step") for r in rows], pa.int64()),
        "env_id": pa.array([r["env_id"] for r in rows], pa.string()),
        "seed": pa.array([r["seed"] for r in rows], pa.int64()),
        "group_id": pa.array([r["group_id"] for r in rows], pa.string()),
        "trajectory_id": pa.array([r["trajectory_id"] for r in rows], pa.string()),
        "messages": pa.array([r["messages"] for r in rows], _MESSAGES),
        "input_ids": pa.array([r["token_ids"] for r in rows], pa.list_(pa.int32())),
        "loss_mask": pa.array([r["loss_mask"] for r in rows], pa.list_(pa.int8())),
        "logprobs": pa.array([r["logprobs"] for r in rows], pa.list_(pa.float64())),
        "advantages": pa.array([token_advantages(r) for r in rows], pa.list_(pa.float64())),
        "reward": pa.array([r["reward"] for r in rows], pa.float64()),
        "success": pa.array([record_success(r) for r in rows], pa.bool_()),
        "stop_reason": pa.array([r["stop_reason"] for r in rows], pa.string()),
        "num_turns": pa.array([len(r["turns"]) for r in rows], pa.int32()),
        "num_tool_calls": pa.array(
            [sum(len(t["action"]["tool_calls"]) for t in r["turns"]) for r in rows], pa.int32()
        ),
    }
    for name in components:
        columns[f"reward/{name}"] = pa.array(
            [r["reward_components"].get(name) for r in rows], pa.float64()
        )
    table = pa.table(columns)
    folder = Path(out) / "data"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / "train-00000-of-00001.parquet"
    tmp = folder / ".train.parquet.tmp"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, final)
    return final
