"""Shared fixtures for the trajectory tests: a rich, fully populated trajectory."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentic_rl.types import (
    Action,
    Message,
    Observation,
    StopReason,
    ToolCall,
    ToolCallError,
    ToolResult,
    Trajectory,
    Turn,
)


def build_trajectory(i: int = 0, reward: float | None = 1.0,
                     stop_reason: StopReason = StopReason.TERMINATED) -> Trajectory:
    """A two-turn trajectory with every kind of nested field filled in."""
    call = ToolCall(name="calculator", arguments={"expr": "2+3", "opts": {"exact": True}},
                    raw='{"name": "calculator", "arguments": {"expr": "2+3"}}', id="call_0_0")
    turn0 = Turn(
        index=0,
        action=Action(
            text="Let me compute. <tool_call>…</tool_call>",
            tool_calls=(call,),
            tool_call_errors=(ToolCallError(raw="{bad json", message="Expecting value"),),
        ),
        observation=Observation(
            messages=(Message("tool", "5"), Message("tool", "error: Expecting value")),
            tools=({"name": "calculator", "parameters": {"type": "object"}},),
        ),
        reward=0.25,
        tool_results=(ToolResult("call_0_0", "calculator", "5"),
                      ToolResult("", "", "error: Expecting value", ok=False)),
        token_ids=(1, 2, 3, 4),
        loss_mask=(0, 0, 1, 1),
        logprobs=(0.0, 0.0, -0.123456789012345, -1e-9),
        info={"tool_latency_s": 0.01, "nested": {"list": [1, "two", None]}},
    )
    turn1 = Turn(
        index=1, action=Action(text="The answer is 5 — ünïcode\nline2"), observation=None,
        reward=1.0, tool_results=(), token_ids=(5, 6), loss_mask=(1, 1),
        logprobs=(-0.5, -2.25), info={},
    )
    return Trajectory(
        env_id="calculator-v0", seed=42 + i, group_id=f"g{i // 2}", trajectory_id=f"t{i}",
        messages=(Message("system", "You are helpful."), Message("user", "2+3?"),
                  Message("assistant", "Let me compute."), Message("tool", "5")),
        turns=(turn0, turn1), token_ids=(1, 2, 3, 4, 5, 6), loss_mask=(0, 0, 1, 1, 1, 1),
        logprobs=(0.0, 0.0, -0.123456789012345, -1e-9, -0.5, -2.25),
        stop_reason=stop_reason, reward=reward,
        reward_components={"correct_answer": 1.0, "tool_call_format": -0.5},
        info={"level": "easy", "answer": "5"},
    )


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    """Factory fixture: ``make_trajectory(i, reward=..., stop_reason=...)``."""
    return build_trajectory
