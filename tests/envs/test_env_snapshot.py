"""snapshot()/restore() of the env contract: calculator-v0, and the default refusal."""

from __future__ import annotations

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.base import Env, SnapshotNotSupportedError
from agentic_rl.envs.calculator import CalculatorSnapshot
from agentic_rl.types import Action, ToolCall

CALL = Action("", tool_calls=(ToolCall("calculator", {"expression": "6 * 7"}, id="call_0_0"),))


def test_calculator_restore_replays_identically():
    env = make("calculator-v0")
    first, _ = env.reset(seed=11)
    env.step(CALL)
    snap = env.snapshot()
    final = Action(f"<answer>{env.task.answer}</answer>")
    _, reward, terminated, _, _ = env.step(final)
    assert terminated and reward == 1.0
    env.restore(snap)  # back before the final answer: the episode is live again
    assert env.oracle_reply() == final.text
    assert env.step(final)[1:3] == (1.0, True)
    # into another instance, after a different episode
    other = make("calculator-v0")
    other.reset(seed=99)
    other.restore(snap)
    assert other.task == env.task and other.step(final)[1] == 1.0
    assert isinstance(snap, CalculatorSnapshot)
    with pytest.raises(TypeError, match="expected a CalculatorSnapshot"):
        env.restore({"task": None})


def test_calculator_snapshot_after_reset_restarts_the_episode():
    env = make("calculator-v0")
    env.reset(seed=3)
    start = env.snapshot()
    env.step(CALL)
    env.step(Action("<answer>1</answer>"))
    env.restore(start)
    assert env.oracle_reply().startswith("<tool_call>")


class _Plain(Env):
    def reset(self, seed=None, options=None):
        raise AssertionError

    def step(self, action):
        raise AssertionError

    def rubric(self, weights=None):
        raise AssertionError


def test_default_snapshot_names_the_env():
    env = _Plain()
    with pytest.raises(SnapshotNotSupportedError, match="_Plain"):
        env.snapshot()
    env.env_id = "plain-v0"
    with pytest.raises(NotImplementedError, match="plain-v0.*restore"):
        env.restore(object())
