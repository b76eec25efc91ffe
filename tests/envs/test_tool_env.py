"""ToolEnv: a new tool env is its task, tools and rubric; the base does the bookkeeping."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs import ToolEnv
from agentic_rl.envs.base import EpisodeEndedError, EpisodeNotStartedError, EpisodeState
from agentic_rl.envs.checker import check_env
from agentic_rl.envs.context import EnvContext
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.components import correct_answer, num_tool_calls
from agentic_rl.tools import format_tool_call, parse_tool_calls
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
        if self.x is None or self.episode.done:
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
    assert [t["name"] for t in obs.tools] == ["double"] and env.episode.trajectory_id == "t7"
    call = ToolCall("double", {"x": 7}, id="call_0_0")
    obs, reward, terminated, _, info = env.step(Action("", (call,)))
    assert (reward, terminated, env.episode.turn) == (0.0, False, 1)
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


class HookDoubleEnv(ToolEnv):
    """DoubleEnv written with the hooks only: no reset, no step, no guards of its own."""

    max_turns = 3

    def __init__(self, context=EnvContext()):
        self.setup_tools(
            {double.name: double}, "Use the double tool.", {"double": "read_only"}, context=context
        )

    def new_task(self, seed):
        self.x = seed % 50
        return f"What is 2 * {self.x}?"

    def task_info(self):
        return {"x": self.x}

    def grade_answer(self, text):
        correct = text.strip() == f"<answer>{2 * self.x}</answer>"
        return float(correct), {"correct": correct}

    def oracle_turn(self):
        if self.episode.turn == 0:
            return format_tool_call("double", {"x": self.x})
        return f"<answer>{2 * self.x}</answer>"

    rubric = DoubleEnv.rubric


def test_a_hook_env_passes_every_check_and_steps_as_the_protocol_says():
    report = check_env(HookDoubleEnv, seeds=range(3))
    assert "oracle" in report.passed and report.oracle_success == 1.0
    env = HookDoubleEnv()
    assert env.oracle_reply() is None  # before reset: the base's guard, not the hook
    with pytest.raises(EpisodeNotStartedError):
        env.step(Action("x"))
    obs, info = env.reset(seed=7, options={"trajectory_id": "t7"})
    assert info == {"x": 7} and env.episode == EpisodeState(True, 0, False, "t7")
    call = ToolCall("double", {"x": 7}, id="call_0_0")
    obs, reward, terminated, truncated, info = env.step(Action("", (call,)))
    assert (obs.tool_results[0].content, reward, terminated, truncated) == ("14", 0.0, False, False)
    assert info == {"tool_calls": 1, "tool_errors": 0} and env.episode.turn == 1
    assert env.step(Action("<answer>14</answer>"))[1:] == (1.0, True, False, {"correct": True})
    assert env.episode.done and env.oracle_reply() is None
    with pytest.raises(EpisodeEndedError):
        env.step(Action("x"))


def test_max_turns_truncates_the_tool_turn_that_reaches_it():
    env = HookDoubleEnv()
    env.reset(seed=1)
    call = Action("", (ToolCall("double", {"x": 1}, id="c"),))
    assert [env.step(call)[3] for _ in range(3)] == [False, False, True]
    assert env.episode.done
    with pytest.raises(EpisodeEndedError):
        env.step(call)


def test_the_episode_state_is_read_only_and_missing_hooks_are_named():
    env = HookDoubleEnv()
    with pytest.raises(AttributeError):
        env.episode = EpisodeState(True, 5, False, "x")  # type: ignore[misc]

    class NoTask(ToolEnv):
        rubric = DoubleEnv.rubric

    with pytest.raises(NotImplementedError, match="NoTask implements neither new_task"):
        NoTask().reset(seed=0)


def test_format_tool_call_is_what_the_parser_reads():
    calls, errors = parse_tool_calls(format_tool_call("double", {"x": 3, "s": 'a "q"'}))
    assert errors == () and (calls[0].name, calls[0].arguments) == (
        "double",
        {"x": 3, "s": 'a "q"'},
    )
