"""Round-trip tests for trajectory_to_record / trajectory_from_record."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentic_rl.trajectories import SCHEMA_VERSION, trajectory_from_record, trajectory_to_record
from agentic_rl.types import StopReason


def test_round_trip_through_json_is_exact(make_trajectory):
    traj = make_trajectory()
    record = trajectory_to_record(traj)
    back = trajectory_from_record(json.loads(json.dumps(record)))
    assert back == traj
    # Nested types are rebuilt, not left as dicts/lists.
    assert isinstance(back.turns, tuple) and isinstance(back.turns[0].action.tool_calls, tuple)
    assert back.turns[0].action.tool_call_errors[0].message == "Expecting value"
    assert back.turns[0].observation.tools[0]["name"] == "calculator"
    assert back.turns[1].observation is None
    assert back.stop_reason is StopReason.TERMINATED


@pytest.mark.parametrize("reason", list(StopReason))
def test_every_stop_reason_and_none_reward_round_trip(make_trajectory, reason):
    traj = make_trajectory(reward=None, stop_reason=reason)
    assert trajectory_from_record(json.loads(json.dumps(trajectory_to_record(traj)))) == traj


def test_record_layout_and_extra_keys(make_trajectory):
    record = trajectory_to_record(make_trajectory(), run="r1", step=3, phase="rl", advantage=0.5)
    assert record["schema_version"] == SCHEMA_VERSION == 4
    assert record["stop_reason"] == "terminated"  # enum stored as its value
    assert (record["run"], record["step"], record["phase"], record["advantage"]) == (
        "r1",
        3,
        "rl",
        0.5,
    )
    assert record["turns"][0]["action"]["tool_calls"][0]["id"] == "call_0_0"
    json.dumps(record, allow_nan=False)  # strictly JSON-serialisable
    # Extra keys are ignored when reading back.
    assert trajectory_from_record(record) == make_trajectory()


def test_extra_key_colliding_with_field_raises(make_trajectory):
    with pytest.raises(ValueError, match="reward"):
        trajectory_to_record(make_trajectory(), reward=3.0)


@pytest.mark.parametrize("version", [None, 0, 5, "1"])
def test_unknown_schema_version_raises(make_trajectory, version):
    record = trajectory_to_record(make_trajectory())
    if version is None:
        del record["schema_version"]
    else:
        record["schema_version"] = version
    with pytest.raises(ValueError, match="schema_version"):
        trajectory_from_record(record)


def test_missing_field_raises_value_error(make_trajectory):
    record = trajectory_to_record(make_trajectory())
    del record["turns"][0]["action"]["text"]
    with pytest.raises(ValueError, match="text"):
        trajectory_from_record(record)


def _legacy_record(traj, version):
    """``traj`` as a record of schema ``version`` (1 or 2): typed step data in ``info`` dicts."""
    record = trajectory_to_record(traj)
    record["schema_version"] = version
    for turn in record["turns"]:
        typed = {k: turn.pop(k) for k in ("risk_events", "memory_events", "process_reward")}
        reset = turn.pop("context_reset")
        turn["info"].update({k: v for k, v in typed.items() if v not in ([], None)})
        if reset:
            turn["info"]["context_reset"] = True
    for key in ("failure", "policy_version"):
        value = record.pop(key)
        if value is not None:
            record["info"][key] = value
    return record


@pytest.mark.parametrize("version", [1, 2])
def test_older_records_still_read_with_info_keys_as_fields(make_trajectory, version):
    """Versions 1 and 2 kept risk/memory events, process rewards, context resets, failures and
    policy versions in ``info``: reading moves them into the typed fields."""
    traj = dataclasses.replace(make_trajectory(), failure="reward raised", policy_version=4)
    record = json.loads(json.dumps(_legacy_record(traj, version)))
    assert record["turns"][0]["info"]["process_reward"] == -0.5 and "failure" in record["info"]
    back = trajectory_from_record(record)
    assert back == traj and back.failed and back.policy_version == 4
    assert back.turns[0].risk_events[0].denied and back.turns[0].memory_events[0].entry_ids == (3,)


def test_typed_step_fields_round_trip(make_trajectory):
    traj = dataclasses.replace(make_trajectory(), failure="step raised", policy_version=7)
    record = json.loads(json.dumps(trajectory_to_record(traj)))
    assert record["failure"] == "step raised" and record["policy_version"] == 7
    assert record["turns"][0]["risk_events"][0]["category"] == "denied"
    assert (
        record["turns"][0]["process_reward"] == -0.5
        and record["turns"][1]["process_reward"] is None
    )
    assert "risk_events" not in record["turns"][0]["info"]
    assert trajectory_from_record(record) == traj


def test_policy_version_extra_key_is_the_written_value(make_trajectory):
    record = trajectory_to_record(make_trajectory(), policy_version=3)
    assert trajectory_from_record(record).policy_version == 3


def test_segment_starts_round_trip_and_old_records_have_one_segment(make_trajectory):
    import dataclasses

    t = dataclasses.replace(make_trajectory(), segment_starts=(0, 4))
    record = json.loads(json.dumps(trajectory_to_record(t)))
    assert record["segment_starts"] == [0, 4] and trajectory_from_record(record) == t
    del record["segment_starts"]  # written before segments existed
    assert trajectory_from_record(record).segment_starts == (0,)


def test_turn_truncated_round_trips_and_old_records_read_false(make_trajectory):
    import dataclasses

    t = make_trajectory()
    cut = dataclasses.replace(
        t,
        turns=(*t.turns[:-1], dataclasses.replace(t.turns[-1], truncated=True)),
        stop_reason=StopReason.MAX_NEW_TOKENS,
    )
    record = json.loads(json.dumps(trajectory_to_record(cut)))
    assert record["turns"][-1]["truncated"] is True and record["stop_reason"] == "max_new_tokens"
    assert trajectory_from_record(record) == cut and cut.truncated
    for turn in record["turns"]:
        del turn["truncated"]  # written before the field existed
    assert not any(x.truncated for x in trajectory_from_record(record).turns)
