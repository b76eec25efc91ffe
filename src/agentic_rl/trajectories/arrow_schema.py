"""The Parquet (Arrow) schema of stored trajectories, and the record <-> row conversion.

One fixed schema, so that every shard of a store has the same columns and DuckDB, pandas,
pyarrow and HF ``datasets`` read a whole store as one table. Columns (schema version 4):

=====================  ==================================================================
column                 type and meaning
=====================  ==================================================================
schema_version         int32: :data:`~agentic_rl.trajectories.serialize.SCHEMA_VERSION`
run_id                 string: the run (the run directory's name); null outside runs
phase, tag             string: ``warmup`` / ``rl`` / ``eval``, eval tag (``base``, ``final``)
step, rl_step          int64: trainer step the trajectory belongs to
policy_version         int64: optimizer updates the sampling policy had received
env_id, seed           string, int64: re-create the env with ``make(env_id, **env_kwargs)``
env_kwargs_json        string: JSON of the env's constructor kwargs (for replay)
group_id               string: the G rollouts of one task share it
trajectory_id          string: unique within a run
stop_reason            string: a :class:`~agentic_rl.types.StopReason` value
reward                 float64: total scored reward (null until scored)
reward_components      list<struct<name: string, value: float64>>
advantage              float64: the trajectory's scalar advantage, when one was used
advantage_turn         list<float64>: per-turn advantages (``record["advantages"]["turn"]``)
advantage_token        list<float64>: per-token advantages, length T
num_turns              int32; num_tool_calls int32; num_generated_tokens int32 (derived)
messages               list<struct<role: string, content: string>>
turns                  list<struct<...>>: index, action_text, tool_calls (id, name,
                       arguments_json, raw), tool_call_errors (raw, message),
                       observation (null or struct of messages, tools_json), reward,
                       tool_results (call_id, name, content, ok), token_ids, loss_mask,
                       logprobs, info_json, truncated (bool; null in shards written
                       before it existed = False), risk_events (category, tool, reason,
                       call_id, rule, denied), memory_events (op, ok, entry_ids, hits,
                       store_size), process_reward (float64, null = none), context_reset
                       (bool); the last four are null in shards of versions 1 and 2, whose
                       turns kept them in info_json
token_ids              list<int32>, length T
loss_mask              list<int8>, length T (1 = sampled by the policy)
logprobs               list<float64>, length T (sampling logprobs, 0.0 off the mask)
segment_starts         list<int64>: token indices where the stream's segments start (rebuilt
                       contexts); null in shards written before the column existed (= [0])
timings                list<struct<name: string, value: float64>> (seconds)
failure                string: why the trajectory failed (null = it did not; in info_json
                       before version 3)
sampling               struct<seed: int64, stream: int64, temperature: float64, greedy: bool,
                       max_new_tokens: int64>: how the policy sampled it
                       (:class:`~agentic_rl.types.RolloutSampling`; seed null = the shared
                       RNG); null when no policy sampled it, and in shards of versions 1 to 3
                       (written before the column existed; they read back with no sampling)
info_json              string: the trajectory's free ``info`` dict as JSON
extra_json             string: any other top-level record keys as JSON
=====================  ==================================================================

Free-form dicts (tool arguments, ``info``) have no fixed shape, so they are stored as JSON
text; DuckDB's ``json_extract`` reads them. Floats are float64 so logprobs round-trip exactly.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from agentic_rl.trajectories.serialize import SCHEMA_VERSION

_NAMED = pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64())]))
_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
_TURN = pa.struct(
    [
        ("index", pa.int32()),
        ("action_text", pa.string()),
        (
            "tool_calls",
            pa.list_(
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("name", pa.string()),
                        ("arguments_json", pa.string()),
                        ("raw", pa.string()),
                    ]
                )
            ),
        ),
        ("tool_call_errors", pa.list_(pa.struct([("raw", pa.string()), ("message", pa.string())]))),
        ("observation", pa.struct([("messages", _MESSAGES), ("tools_json", pa.string())])),
        ("reward", pa.float64()),
        (
            "tool_results",
            pa.list_(
                pa.struct(
                    [
                        ("call_id", pa.string()),
                        ("name", pa.string()),
                        ("content", pa.string()),
                        ("ok", pa.bool_()),
                    ]
                )
            ),
        ),
        ("token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float64())),
        ("info_json", pa.string()),
        ("truncated", pa.bool_()),
        (
            "risk_events",
            pa.list_(
                pa.struct(
                    [
                        ("category", pa.string()),
                        ("tool", pa.string()),
                        ("reason", pa.string()),
                        ("call_id", pa.string()),
                        ("rule", pa.string()),
                        ("denied", pa.bool_()),
                    ]
                )
            ),
        ),
        (
            "memory_events",
            pa.list_(
                pa.struct(
                    [
                        ("op", pa.string()),
                        ("ok", pa.bool_()),
                        ("entry_ids", pa.list_(pa.int64())),
                        ("hits", pa.int64()),
                        ("store_size", pa.int64()),
                    ]
                )
            ),
        ),
        ("process_reward", pa.float64()),
        ("context_reset", pa.bool_()),
    ]
)

_SAMPLING = pa.struct(
    [
        ("seed", pa.int64()),
        ("stream", pa.int64()),
        ("temperature", pa.float64()),
        ("greedy", pa.bool_()),
        ("max_new_tokens", pa.int64()),
    ]
)

SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("run_id", pa.string()),
        ("phase", pa.string()),
        ("tag", pa.string()),
        ("step", pa.int64()),
        ("rl_step", pa.int64()),
        ("policy_version", pa.int64()),
        ("env_id", pa.string()),
        ("seed", pa.int64()),
        ("env_kwargs_json", pa.string()),
        ("group_id", pa.string()),
        ("trajectory_id", pa.string()),
        ("stop_reason", pa.string()),
        ("reward", pa.float64()),
        ("reward_components", _NAMED),
        ("advantage", pa.float64()),
        ("advantage_turn", pa.list_(pa.float64())),
        ("advantage_token", pa.list_(pa.float64())),
        ("num_turns", pa.int32()),
        ("num_tool_calls", pa.int32()),
        ("num_generated_tokens", pa.int32()),
        ("messages", _MESSAGES),
        ("turns", pa.list_(_TURN)),
        ("token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float64())),
        ("segment_starts", pa.list_(pa.int64())),
        ("timings", _NAMED),
        ("failure", pa.string()),
        ("sampling", _SAMPLING),
        ("info_json", pa.string()),
        ("extra_json", pa.string()),
    ]
)

#: top-level record keys stored in their own column (everything else goes to ``extra_json``)
_COLUMN_EXTRAS = ("run_id", "phase", "tag", "step", "rl_step", "policy_version", "advantage")
_RECORD_KEYS = frozenset(
    {
        "schema_version",
        "env_id",
        "seed",
        "group_id",
        "trajectory_id",
        "messages",
        "turns",
        "token_ids",
        "loss_mask",
        "logprobs",
        "stop_reason",
        "reward",
        "reward_components",
        "info",
        "env_kwargs",
        "advantages",
        "timings",
        "segment_starts",
        "failure",
        "sampling",
        *_COLUMN_EXTRAS,
    }
)


# turn fields of schema version 3 (in ``info`` before); null in older shards
_TYPED_TURN_KEYS = ("risk_events", "memory_events", "process_reward", "context_reset")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def _named(d: dict[str, float] | None) -> list[dict[str, Any]] | None:
    if d is None:
        return None
    return [{"name": str(k), "value": None if v is None else float(v)} for k, v in d.items()]


def _turn_row(t: dict[str, Any]) -> dict[str, Any]:
    a, obs = t["action"], t["observation"]
    return {
        "index": t["index"],
        "action_text": a["text"],
        "tool_calls": [
            {
                "id": c["id"],
                "name": c["name"],
                "arguments_json": _dumps(c["arguments"]),
                "raw": c["raw"],
            }
            for c in a["tool_calls"]
        ],
        "tool_call_errors": list(a["tool_call_errors"]),
        "observation": None
        if obs is None
        else {"messages": obs["messages"], "tools_json": _dumps(obs["tools"])},
        "reward": t["reward"],
        "tool_results": list(t["tool_results"]),
        "token_ids": t["token_ids"],
        "loss_mask": t["loss_mask"],
        "logprobs": t["logprobs"],
        "info_json": _dumps(t["info"]),
        "truncated": bool(t.get("truncated", False)),
        **{k: t.get(k) for k in _TYPED_TURN_KEYS},
    }


def record_to_row(record: dict[str, Any]) -> dict[str, Any]:
    """A trajectory record (``trajectory_to_record``) as a row of :data:`SCHEMA`.

    Raises:
        ValueError: a required trajectory field is missing.
        TypeError: a free-form value (``info``, tool arguments, an extra key) is not JSON-serialisable.
    """
    try:
        turns = record["turns"]
        advantages = record.get("advantages") or {}
        extra = {k: v for k, v in record.items() if k not in _RECORD_KEYS}
        row = {
            "schema_version": record["schema_version"],
            **{k: record.get(k) for k in _COLUMN_EXTRAS},
            "env_id": record["env_id"],
            "seed": record["seed"],
            "env_kwargs_json": None
            if record.get("env_kwargs") is None
            else _dumps(record["env_kwargs"]),
            "group_id": record["group_id"],
            "trajectory_id": record["trajectory_id"],
            "stop_reason": record["stop_reason"],
            "reward": record["reward"],
            "reward_components": _named(record["reward_components"]),
            "advantage_turn": advantages.get("turn"),
            "advantage_token": advantages.get("token"),
            "num_turns": len(turns),
            "num_tool_calls": sum(len(t["action"]["tool_calls"]) for t in turns),
            "num_generated_tokens": sum(record["loss_mask"]),
            "messages": record["messages"],
            "turns": [_turn_row(t) for t in turns],
            "token_ids": record["token_ids"],
            "loss_mask": record["loss_mask"],
            "logprobs": record["logprobs"],
            "segment_starts": record.get("segment_starts"),
            "timings": _named(record.get("timings")),
            "failure": record.get("failure"),
            "sampling": record.get("sampling"),
            "info_json": _dumps(record["info"]),
            "extra_json": _dumps(extra) if extra else None,
        }
    except KeyError as exc:
        raise ValueError(f"trajectory record is missing field {exc.args[0]!r}") from exc
    return row


def _turn_record(t: dict[str, Any]) -> dict[str, Any]:
    obs = t["observation"]
    return {
        "index": t["index"],
        "action": {
            "text": t["action_text"],
            "tool_calls": [
                {
                    "name": c["name"],
                    "arguments": json.loads(c["arguments_json"]),
                    "raw": c["raw"],
                    "id": c["id"],
                }
                for c in t["tool_calls"]
            ],
            "tool_call_errors": t["tool_call_errors"],
        },
        "observation": None
        if obs is None
        else {"messages": obs["messages"], "tools": json.loads(obs["tools_json"])},
        "reward": t["reward"],
        "tool_results": t["tool_results"],
        "token_ids": t["token_ids"],
        "loss_mask": t["loss_mask"],
        "logprobs": t["logprobs"],
        "info": json.loads(t["info_json"]),
        "truncated": bool(t.get("truncated")),
        # a version 3 turn always has context_reset; older ones keep these keys in info
        **({k: t[k] for k in _TYPED_TURN_KEYS} if t.get("context_reset") is not None else {}),
    }


def row_to_record(row: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`record_to_row`: the record as it was appended.

    Optional keys (``run_id``, ``phase``, ``step``, ``env_kwargs``, ``advantages``, ``timings``,
    ...) that were absent or None come back absent; ``failure`` and ``policy_version`` (fields
    since schema version 3) come back in version 3 rows and later, None included, and
    ``sampling`` (since version 4) in version 4 rows. Derived columns are
    dropped.
    """
    record: dict[str, Any] = {
        "schema_version": row["schema_version"],
        "env_id": row["env_id"],
        "seed": row["seed"],
        "group_id": row["group_id"],
        "trajectory_id": row["trajectory_id"],
        "messages": row["messages"],
        "turns": [_turn_record(t) for t in row["turns"]],
        "token_ids": row["token_ids"],
        "loss_mask": row["loss_mask"],
        "logprobs": row["logprobs"],
        "stop_reason": row["stop_reason"],
        "reward": row["reward"],
        "reward_components": {c["name"]: c["value"] for c in row["reward_components"] or ()},
        "info": json.loads(row["info_json"]),
    }
    if row["schema_version"] >= 3:  # trajectory fields since version 3, None included
        record["failure"] = row.get("failure")
        record["policy_version"] = row.get("policy_version")
    if row["schema_version"] >= 4:  # since version 4
        record["sampling"] = row.get("sampling")
    for key in _COLUMN_EXTRAS:
        if row.get(key) is not None:
            record[key] = row[key]
    if row.get("env_kwargs_json") is not None:
        record["env_kwargs"] = json.loads(row["env_kwargs_json"])
    if row.get("advantage_turn") is not None or row.get("advantage_token") is not None:
        record["advantages"] = {
            "turn": row.get("advantage_turn"),
            "token": row.get("advantage_token"),
        }
    if row.get("segment_starts") is not None:
        record["segment_starts"] = row["segment_starts"]
    if row.get("timings") is not None:
        record["timings"] = {c["name"]: c["value"] for c in row["timings"]}
    if row.get("extra_json"):
        record.update(json.loads(row["extra_json"]))
    return record


def records_to_table(records: list[dict[str, Any]]) -> pa.Table:
    """Records as one Arrow table of :data:`SCHEMA`.

    Raises:
        ValueError, TypeError: as :func:`record_to_row`, or a value does not fit its column
            (``pyarrow`` errors are re-raised as ``TypeError`` naming the trajectory).
    """
    rows = []
    for record in records:
        if not isinstance(record, dict):
            raise TypeError(f"a record must be a dict, got {type(record).__name__}")
        if record.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"record schema_version {record.get('schema_version')!r} != {SCHEMA_VERSION}"
            )
        rows.append(record_to_row(record))
    try:
        return pa.Table.from_pylist(rows, schema=SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise TypeError(f"a record does not fit the trajectory schema: {exc}") from exc
