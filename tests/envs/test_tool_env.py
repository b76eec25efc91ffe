"""ToolEnv: a new tool env is its task, tools and rubric; the base does the bookkeeping."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs import ToolEnv
from agentic_rl.envs.base import EpisodeEndedError, EpisodeNotStartedError
from agentic_rl.envs.checker import check_env
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.components import correct_answer, num_tool_calls
from agentic_rl.tools.definition.tool import tool
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import Action, Observation, RiskEvent, ToolCall


@tool
def double(x: int) -> str:
    """Double an integer."""
    return str(2 * x)


class DoubleEnv(ToolEnv):
    """Double a seeded number with the ``double`` tool, then answer."""

    def __init__(self, permissions=None):
        self.setup_tools(
            {double.name: double},
            "Use the double tool.",
            PermissionPolicy.allow_all({double.name: "read_only"}),
            permissions,
        )
        self.x: int | None = None
        self._called = False

    def reset(self, seed=None, options=None):
        seed = self.start_episode(seed, options)
        self.x, self._called = seed % 50, False
        return self.first_observation(f"What is 2 * {self.x}?"), {"x": self.x}

    def step(self, action):
        self.begin_step(self.x is not None)
        if action.tool_calls or action.tool_call_errors:
            self._called = True
            report = self.run_tools(action)
            obs, info = self.tool_turn(report.results, report.risk_events)
            return obs, 0.0, False, False, info
        self.end_episode()
        correct = action.text.strip() == f"<answer>{2 * self.x}</answer>"
        return Observation(()), float(correct), True, False, {"correct": correct}

    def oracle_reply(self):
        if self.x is None or self._done:
            return None
        if not self._called:
            call = {"name": "double", "arguments": {"x": self.x}}
            return f"<tool_call>{json.dumps(call)}</tool_call>"
        return f"<answer>{2 * self.x}</answer>"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        return Rubric(
            [
                RewardFunction("correct_answer", RewardGroup.OUTCOME, correct_answer),
                RewardFunction("tool_calls", RewardGroup.COST, num_tool_calls, weight=0.01),
            ],
            weights,
        )


def test_a_minimal_tool_env_passes_every_check():
    report = check_env(DoubleEnv, seeds=range(3))
    assert "oracle" in report.passed and report.oracle_success == 1.0


def test_guards_turns_and_typed_tool_turn():
    env = DoubleEnv()
    with pytest.raises(EpisodeNotStartedError):
        env.step(Action("x"))
    obs, _ = env.reset(seed=7, options={"trajectory_id": "t7"})
    assert obs.messages[0].role == "system" and "double" in obs.messages[0].content
    assert [t["name"] for t in obs.tools] == ["double"] and env._trajectory_id == "t7"
    call = ToolCall("double", {"x": 7}, id="call_0_0")
    obs, reward, terminated, _, info = env.step(Action("", (call,)))
    assert (reward, terminated, env._turn) == (0.0, False, 1)
    assert obs.tool_results[0].content == "14" and obs.messages[0].content == "14"
    assert info == {"tool_calls": 1, "tool_errors": 0} and obs.risk_events == ()
    env.step(Action("<answer>14</answer>"))
    with pytest.raises(EpisodeEndedError):
        env.step(Action("x"))


def test_a_denied_call_is_a_typed_risk_event():
    deny = {"tools": {"double": {"side_effect": "read_only", "mode": "deny"}}}
    env = DoubleEnv(permissions=deny)
    env.reset(seed=1)
    obs, *_ = env.step(Action("", (ToolCall("double", {"x": 1}, id="c"),)))
    assert isinstance(obs.risk_events[0], RiskEvent) and obs.risk_events[0].denied
    assert not obs.tool_results[0].ok


def test_risk_event_from_dict_rejects_a_non_event():
    assert RiskEvent.from_dict({"category": "x", "extra": 1}) == RiskEvent("x")
    with pytest.raises(TypeError, match="category"):
        RiskEvent.from_dict({"tool": "x"})
