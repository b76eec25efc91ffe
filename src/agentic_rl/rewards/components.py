"""Reward components shared by the built-in envs (each a rubric function ``fn(trajectory) -> float``).

They read what every tool env's ``step`` reports (:mod:`agentic_rl.envs.tool_env` documents
the contract): the typed ``Turn.tool_results`` (one per accepted call and per parser error,
``ok`` False for those that failed); on the final turn of a terminated episode,
``info["correct"]`` (the graded answer is right) and ``info["answer_format_ok"]`` (the reply had
exactly one well-formed ``<answer>`` tag). A missing key counts as False, so a trajectory that
never reached a final answer scores 0.

==================  =========  =========================================================
component           group      value
==================  =========  =========================================================
correct_answer      outcome    1.0 if the final answer was correct, else 0.0
answer_format       process    1.0 if the final reply had one well-formed answer tag
tool_call_format    process    fraction of the tool calls that ran without error (0 if none)
num_tool_calls      cost       number of tool calls (accepted + rejected)
generated_tokens    cost       tokens the policy sampled
==================  =========  =========================================================
"""

from __future__ import annotations

from typing import Any

from agentic_rl.types import Trajectory

__all__ = [
    "answer_format",
    "correct_answer",
    "final_info",
    "generated_tokens",
    "num_tool_calls",
    "tool_call_format",
]


def final_info(trajectory: Trajectory) -> dict[str, Any]:
    """The ``info`` of the last turn of a terminated episode; ``{}`` otherwise. Never raises."""
    if trajectory.turns and trajectory.terminated:
        return trajectory.turns[-1].info
    return {}


def correct_answer(trajectory: Trajectory) -> float:
    """1.0 if the episode ended with a correct single answer tag, else 0.0."""
    return 1.0 if final_info(trajectory).get("correct") else 0.0


def answer_format(trajectory: Trajectory) -> float:
    """1.0 if the final reply had exactly one well-formed ``<answer>`` tag, else 0.0."""
    return 1.0 if final_info(trajectory).get("answer_format_ok") else 0.0


def tool_call_format(trajectory: Trajectory) -> float:
    """Fraction of the episode's tool calls (accepted + rejected) that ran without error; 0 if none."""
    results = [r for turn in trajectory.turns for r in turn.tool_results]
    return sum(r.ok for r in results) / len(results) if results else 0.0


def num_tool_calls(trajectory: Trajectory) -> float:
    """Number of tool calls in the episode (a cost)."""
    return float(sum(len(turn.tool_results) for turn in trajectory.turns))


def generated_tokens(trajectory: Trajectory) -> float:
    """Number of tokens the policy sampled (a cost)."""
    return float(trajectory.num_generated_tokens)
