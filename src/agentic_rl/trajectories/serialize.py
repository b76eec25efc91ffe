"""Convert a ``Trajectory`` to a plain JSON record and back, exactly.

A record is a flat ``dict`` of JSON types (str, int, float, bool, None, list, dict). It holds
every field of the trajectory, nested turns, actions, tool calls, tool call errors, tool
results and observations included, plus ``"schema_version"``. Enums are stored as their value
(``StopReason.MAX_TURNS`` -> ``"max_turns"``) and tuples as lists. Extra keys (run, step,
phase, advantage, ...) sit at the top level next to the trajectory fields so that tools such as
DuckDB or pandas can filter on them without unpacking anything.

Round trip: ``trajectory_from_record(json.loads(json.dumps(trajectory_to_record(t)))) == t``
for any trajectory whose ``info`` dicts and tool arguments hold JSON types (a tuple stored in
an ``info`` dict comes back as a list).

Record layout (schema version 4; version 1 lacked the optional keys below, versions 1 and 2
kept the typed step data in ``info`` dicts, see below; versions 1 to 3 had no ``sampling``)::

    {"schema_version": 4, "env_id": str, "seed": int, "group_id": str,
     "trajectory_id": str, "messages": [{"role", "content"}], "turns": [turn],
     "token_ids": [int], "loss_mask": [int], "logprobs": [float], "stop_reason": str,
     "reward": float | null, "reward_components": {str: float}, "info": {...},
     "failure": str | null, "policy_version": int | null,
     "sampling": {"seed": int | null, "stream", "temperature", "greedy", "max_new_tokens"}
                 | null, **extra}

    turn = {"index", "action": {"text", "tool_calls": [{"name", "arguments", "raw", "id"}],
            "tool_call_errors": [{"raw", "message"}]},
            "observation": {"messages": [...], "tools": [{...}]} | null, "reward",
            "tool_results": [{"call_id", "name", "content", "ok"}],
            "token_ids", "loss_mask", "logprobs", "info", "truncated",
            "risk_events": [{"category", "tool", "reason", "call_id", "rule", "denied"}],
            "memory_events": [{"op", "ok", "entry_ids", "hits", "store_size"}],
            "process_reward": float | null, "context_reset": bool}

Optional top-level keys with a meaning (the store gives them columns): ``run_id``, ``phase``,
``tag``, ``step``, ``rl_step``, ``policy_version`` (optimizer updates of the sampling policy),
``env_kwargs`` (constructor kwargs, for replay), ``advantage`` (scalar), ``advantages``
(``{"turn": [float], "token": [float]}``) and ``timings`` (``{name: seconds}``).

``segment_starts`` (``[int]``, the trajectory's field) is written for every trajectory; a record
without it (written before segments existed) reads back with one segment, ``(0,)``. Likewise a
turn without ``truncated`` (``Turn.truncated``, a reply cut by a token budget) reads back False.
``token_versions`` (``[int]``, the policy version of each token; async training only) is written
only when recorded; a record without it reads back with none, ``()``.

Older records (versions 1 and 2) kept the typed data in ``info``: a turn's ``info`` keys
``risk_events``, ``memory_events``, ``process_reward`` and ``context_reset``, and the
trajectory's ``info`` keys ``failure`` and ``policy_version``. Reading such a record moves
those keys out of ``info`` into the fields, so an old record reads as the same trajectory a new run would have produced.

``sampling`` (version 4, :class:`~agentic_rl.types.RolloutSampling`) is how the policy sampled
the trajectory: the round's seed (null: the shared RNG), the episode's stream in the round, the
temperature, greedy and ``max_new_tokens``; null when no policy sampled it. A record of an older
version reads back with ``sampling`` None.

``policy_version`` is also an extra key the trainer passes (the sampling policy's version when
the trajectory is stored): given as ``extra``, it is the value written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentic_rl.types import (
    Action,
    MemoryEvent,
    Message,
    Observation,
    RiskEvent,
    RolloutSampling,
    StopReason,
    ToolCall,
    ToolCallError,
    ToolResult,
    Trajectory,
    Turn,
)

SCHEMA_VERSION = 4
#: versions ``trajectory_from_record`` reads (1: before run_id/env_kwargs/advantages/timings;
#: 1 and 2: typed step data in ``info``; 1 to 3: no ``sampling``)
READABLE_VERSIONS = (1, 2, 3, 4)

# Top-level keys owned by the trajectory; extra keys may not reuse them.
TRAJECTORY_KEYS = frozenset(
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
        "segment_starts",
        "failure",
        "token_versions",
        "sampling",
    }
)

# Turn ``info`` keys of records before version 3 that are now ``Turn`` fields.
_LEGACY_TURN_KEYS = ("risk_events", "memory_events", "process_reward", "context_reset")


def _messages_to_list(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def _observation_to_dict(obs: Observation | None) -> dict[str, Any] | None:
    if obs is None:
        return None
    return {"messages": _messages_to_list(obs.messages), "tools": [dict(t) for t in obs.tools]}


def _turn_to_dict(turn: Turn) -> dict[str, Any]:
    action = turn.action
    return {
        "index": turn.index,
        "action": {
            "text": action.text,
            "tool_calls": [
                {"name": c.name, "arguments": dict(c.arguments), "raw": c.raw, "id": c.id}
                for c in action.tool_calls
            ],
            "tool_call_errors": [
                {"raw": e.raw, "message": e.message} for e in action.tool_call_errors
            ],
        },
        "observation": _observation_to_dict(turn.observation),
        "reward": turn.reward,
        "tool_results": [
            {"call_id": r.call_id, "name": r.name, "content": r.content, "ok": r.ok}
            for r in turn.tool_results
        ],
        "token_ids": list(turn.token_ids),
        "loss_mask": list(turn.loss_mask),
        "logprobs": list(turn.logprobs),
        "info": dict(turn.info),
        "truncated": turn.truncated,
        "risk_events": [e.to_dict() for e in turn.risk_events],
        "memory_events": [e.to_dict() for e in turn.memory_events],
        "process_reward": turn.process_reward,
        "context_reset": turn.context_reset,
    }


def trajectory_to_record(traj: Trajectory, **extra: Any) -> dict[str, Any]:
    """Return ``traj`` as a JSON-serialisable dict, with ``extra`` keys merged at the top.

    Args:
        traj: the trajectory to convert.
        **extra: metadata stored next to the trajectory fields, e.g. ``run``, ``step``,
            ``phase``, ``advantage``. Values must be JSON-serialisable.

    Raises:
        ValueError: an ``extra`` key collides with a trajectory field (e.g. ``reward``).
    """
    clash = sorted(TRAJECTORY_KEYS.intersection(extra))
    if clash:
        raise ValueError(f"extra keys collide with trajectory fields: {clash}")
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "env_id": traj.env_id,
        "seed": traj.seed,
        "group_id": traj.group_id,
        "trajectory_id": traj.trajectory_id,
        "messages": _messages_to_list(traj.messages),
        "turns": [_turn_to_dict(t) for t in traj.turns],
        "token_ids": list(traj.token_ids),
        "loss_mask": list(traj.loss_mask),
        "logprobs": list(traj.logprobs),
        "stop_reason": StopReason(traj.stop_reason).value,
        "reward": traj.reward,
        "reward_components": dict(traj.reward_components),
        "info": dict(traj.info),
        "segment_starts": list(traj.segment_starts),
        "failure": traj.failure,
        "policy_version": traj.policy_version,
        "sampling": None if traj.sampling is None else dataclasses.asdict(traj.sampling),
    }
    if traj.token_versions:  # recorded by async training only (absent from other records)
        record["token_versions"] = list(traj.token_versions)
    record.update(extra)
    return record


def _messages_from_list(items: list[dict[str, Any]]) -> tuple[Message, ...]:
    return tuple(Message(role=m["role"], content=m["content"]) for m in items)


def _observation_from_dict(d: dict[str, Any] | None) -> Observation | None:
    if d is None:
        return None
    return Observation(messages=_messages_from_list(d["messages"]), tools=tuple(d.get("tools", ())))


def _turn_from_dict(d: dict[str, Any]) -> Turn:
    a = d["action"]
    action = Action(
        text=a["text"],
        tool_calls=tuple(
            ToolCall(name=c["name"], arguments=c["arguments"], raw=c["raw"], id=c["id"])
            for c in a["tool_calls"]
        ),
        tool_call_errors=tuple(
            ToolCallError(raw=e["raw"], message=e["message"]) for e in a["tool_call_errors"]
        ),
    )
    info = d["info"]
    typed = {k: d[k] for k in _LEGACY_TURN_KEYS if k in d}
    if len(typed) < len(_LEGACY_TURN_KEYS):  # written before version 3: the data is in info
        info = dict(info)
        typed = {k: info.pop(k) for k in _LEGACY_TURN_KEYS if k in info} | typed
    process_reward = typed.get("process_reward")
    return Turn(
        index=d["index"],
        action=action,
        observation=_observation_from_dict(d["observation"]),
        reward=d["reward"],
        tool_results=tuple(
            ToolResult(call_id=r["call_id"], name=r["name"], content=r["content"], ok=r["ok"])
            for r in d["tool_results"]
        ),
        token_ids=tuple(d["token_ids"]),
        loss_mask=tuple(d["loss_mask"]),
        logprobs=tuple(float(x) for x in d["logprobs"]),
        info=info,
        truncated=bool(d.get("truncated", False)),
        risk_events=tuple(RiskEvent.from_dict(e) for e in typed.get("risk_events") or ()),
        memory_events=tuple(MemoryEvent.from_dict(e) for e in typed.get("memory_events") or ()),
        process_reward=None if process_reward is None else float(process_reward),
        context_reset=bool(typed.get("context_reset", False)),
    )


def _sampling_from_dict(d: dict[str, Any] | None) -> RolloutSampling | None:
    if d is None:
        return None
    return RolloutSampling(
        seed=None if d["seed"] is None else int(d["seed"]),
        stream=int(d["stream"]),
        temperature=float(d["temperature"]),
        greedy=bool(d["greedy"]),
        max_new_tokens=int(d["max_new_tokens"]),
    )


def trajectory_from_record(record: dict[str, Any]) -> Trajectory:
    """Rebuild the ``Trajectory`` stored in ``record``; extra top-level keys are ignored.

    Raises:
        ValueError: ``schema_version`` is missing or unknown, a required field is missing,
            or ``stop_reason`` is not a ``StopReason`` value.
    """
    version = record.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise ValueError(
            f"unknown trajectory schema_version {version!r} (this code reads {SCHEMA_VERSION})"
        )
    info, legacy = record.get("info"), {}
    if version < 3 and isinstance(info, dict):  # failure and policy version were info keys
        info = dict(info)
        legacy = {k: info.pop(k) for k in ("failure", "policy_version") if k in info}
    failure = record.get("failure", legacy.get("failure"))
    sampled_by = record.get("policy_version", legacy.get("policy_version"))
    try:
        return Trajectory(
            env_id=record["env_id"],
            seed=record["seed"],
            group_id=record["group_id"],
            trajectory_id=record["trajectory_id"],
            messages=_messages_from_list(record["messages"]),
            turns=tuple(_turn_from_dict(t) for t in record["turns"]),
            token_ids=tuple(record["token_ids"]),
            loss_mask=tuple(record["loss_mask"]),
            logprobs=tuple(float(x) for x in record["logprobs"]),
            stop_reason=StopReason(record["stop_reason"]),
            reward=record["reward"],
            reward_components=record["reward_components"],
            info=info if info is not None else record["info"],
            segment_starts=tuple(int(s) for s in record.get("segment_starts") or (0,)),
            failure=None if failure is None else str(failure),
            policy_version=None if sampled_by is None else int(sampled_by),
            token_versions=tuple(int(v) for v in record.get("token_versions") or ()),
            sampling=_sampling_from_dict(record.get("sampling")),
        )
    except KeyError as exc:
        raise ValueError(f"trajectory record is missing field {exc.args[0]!r}") from exc
