"""Memory metrics from hand-built trajectories (values worked out in the comments)."""

from __future__ import annotations

import pytest

from agentic_rl.memory import metrics as mm
from agentic_rl.types import Action, MemoryEvent, StopReason, ToolCall, Trajectory, Turn


def _turn(index, calls=(), events=(), sampled=4, context=3, **info):
    ids = tuple(range(context + sampled))
    action = Action("", tuple(ToolCall(n, {}) for n in calls))
    return Turn(
        index,
        action,
        None,
        0.0,
        (),
        ids,
        (0,) * context + (1,) * sampled,
        (0.0,) * len(ids),
        info,
        memory_events=tuple(events),
        context_reset=bool(info.pop("context_reset", False)),
    )


def _ev(op, ok=True, ids=(), hits=0, size=0):
    return MemoryEvent(op, ok, tuple(ids), hits, size)


def _trajectory(turns):
    return Trajectory(
        "memory-recall-v0", 0, "g", "t", (), tuple(turns), (), (), (), StopReason.TERMINATED
    )


@pytest.fixture
def trajectory():
    return _trajectory(
        [
            # turn 0: writes 1, 2, 3 (one fails: full) -> context reset, so no result tokens counted
            _turn(
                0,
                ["memory_write"] * 3,
                [
                    _ev("write", ids=[1], size=1),
                    _ev("write", ids=[2], size=2),
                    _ev("write", ok=False, size=2),
                ],
                sampled=30,
                context=100,
                context_reset=True,
            ),
            # turn 1: a search returning entry 1, and a non-memory call in the same reply
            _turn(
                1,
                ["memory_search", "calculator"],
                [_ev("search", ids=[1], hits=1, size=2)],
                sampled=20,
                context=50,
            ),
            # turn 2: a search that finds nothing, then entry 2 updated (still unused)
            _turn(
                2,
                ["memory_search", "memory_update"],
                [_ev("search", hits=0, size=2), _ev("update", ids=[2], size=2)],
                sampled=10,
                context=8,
            ),
            # turn 3: the answer
            _turn(3, sampled=5, context=6),
        ]
    )


def test_counts(trajectory):
    assert mm.memory_writes(trajectory) == 2.0  # the failed write does not count
    assert mm.memory_reads(trajectory) == 2.0
    assert mm.memory_updates(trajectory) == 1.0
    assert mm.memory_deletes(trajectory) == 0.0
    assert mm.memory_ops(trajectory) == 6.0  # failed ones included
    assert mm.memory_hit_rate(trajectory) == 0.5  # 1 of 2 searches returned something
    assert mm.memory_store_size(trajectory) == 2.0  # size after the last memory call
    assert mm.unused_writes(trajectory) == 1.0  # entry 2 was written, never retrieved


def test_memory_tokens(trajectory):
    # turn 0: 30 sampled, all calls memory, the next turn starts a new context -> 30
    # turn 1: (20 sampled + 8 mask-0 result tokens at the start of turn 2) * 1/2 memory calls = 14
    # turn 2: (10 sampled + 6 mask-0 tokens of turn 3) * 2/2 = 16
    assert mm.memory_tokens(trajectory) == 30 + 14 + 16


def test_deleted_or_retrieved_writes_are_not_junk():
    t = _trajectory(
        [
            _turn(0, ["memory_write"] * 2, [_ev("write", ids=[1]), _ev("write", ids=[2])]),
            _turn(1, ["memory_delete"], [_ev("delete", ids=[2])]),
        ]
    )
    assert mm.unused_writes(t) == 1.0
    t = _trajectory(
        [
            _turn(0, ["memory_write"], [_ev("write", ids=[1])]),
            _turn(1, ["memory_search"], [_ev("search", ids=[1], hits=1)]),
        ]
    )
    assert mm.unused_writes(t) == 0.0


def test_a_trajectory_without_memory_scores_zero():
    t = _trajectory([Turn(0, Action("hi"), None, 0.0, (), (1,), (1,), (0.0,), {})])
    assert all(
        fn(t) == 0.0
        for fn in (
            mm.memory_ops,
            mm.memory_hit_rate,
            mm.memory_store_size,
            mm.unused_writes,
            mm.memory_tokens,
        )
    )


def test_broken_events_fail_loudly():
    turn = Turn(0, Action(""), None, 0.0, (), (), (), (), {}, memory_events=({"op": "x"},))
    t = _trajectory([turn])
    with pytest.raises(TypeError, match="memory_events"):
        mm.memory_ops(t)
