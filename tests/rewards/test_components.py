"""The shared reward components read typed turn data (``Turn.tool_results``), not ``info`` keys."""

from __future__ import annotations

from agentic_rl.rewards.components import (
    answer_format,
    correct_answer,
    num_tool_calls,
    tool_call_format,
)
from agentic_rl.types import Action, StopReason, ToolResult, Trajectory, Turn


def _turn(index: int, results: tuple[ToolResult, ...], info: dict | None = None) -> Turn:
    return Turn(index, Action(text="x"), None, 0.0, results, (1,), (1,), (0.0,), info or {})


def _trajectory(*turns: Turn, stop: StopReason = StopReason.TERMINATED) -> Trajectory:
    n = len(turns)
    return Trajectory("calculator-v0", 0, "g", "t", (), turns, (1,) * n, (1,) * n, (0.0,) * n, stop)


def test_tool_counts_come_from_the_typed_results_whatever_info_says():
    ok, bad = (
        ToolResult("call_0_0", "calculator", "4"),
        ToolResult("call_0_1", "", "Error: x", ok=False),
    )
    # info says nothing (a user env that reports no counts) or something else: the results decide
    t = _trajectory(_turn(0, (ok, bad, ok), {"tool_calls": 99}), _turn(1, (bad,)), _turn(2, ()))
    assert num_tool_calls(t) == 4.0
    assert tool_call_format(t) == 2 / 4
    assert tool_call_format(_trajectory(_turn(0, ()))) == 0.0  # no calls: 0, never a division by 0


def test_answer_components_read_the_final_turn_of_a_terminated_episode_only():
    final = {"correct": True, "answer_format_ok": True}
    assert correct_answer(_trajectory(_turn(0, ()), _turn(1, (), final))) == 1.0
    assert answer_format(_trajectory(_turn(0, ()), _turn(1, (), final))) == 1.0
    cut = _trajectory(_turn(0, (), final), stop=StopReason.MAX_TURNS)
    assert correct_answer(cut) == 0.0 and answer_format(cut) == 0.0
