"""snapshot()/restore() of the env contract: calculator-v0, math-python-v0, and the default refusal."""

from __future__ import annotations

import shutil

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.base import Env, SnapshotNotSupportedError
from agentic_rl.envs.calculator.env import CalculatorEnv, CalculatorSnapshot
from agentic_rl.envs.checker import EnvCheckError, check_env
from agentic_rl.tools.sandbox.bwrap import bwrap_available
from agentic_rl.types import Action, StopReason, ToolCall, Trajectory, Turn
from tests.markers import BWRAP_SKIP_REASON

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


# -- math-python-v0: a registered env with the sandboxed python tool ---------------------------

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)


def _python(code, call_id="call_0_0"):
    return Action("", tool_calls=(ToolCall("python", {"code": code}, id=call_id),))


@needs_bwrap
def test_math_python_snapshot_restores_interpreter_and_files():
    env = make("math-python-v0")
    try:
        env.reset(seed=2)
        env.step(_python("acc = [1]\nopen('w.txt', 'w').write('a')"))
        snap = env.snapshot()
        env.step(_python("acc.append(2)\nopen('w.txt', 'w').write('b')"))
        assert env.step(_python("acc"))[0].messages[0].content == "Out: [1, 2]"
        env.restore(snap)
        assert (
            env.step(_python("acc, open('w.txt').read()"))[0].messages[0].content
            == "Out: ([1], 'a')"
        )
        answer = f"<answer>{env.task.answer}</answer>"
        assert env.step(Action(answer))[1:3] == (1.0, True)
        env.restore(snap)  # the ended episode is live again at the snapshot's turn
        assert env.episode.turn == 1 and env.oracle_reply() == answer
        with pytest.raises(TypeError, match="not a snapshot"):
            env.restore(CalculatorSnapshot(None, False, 0, False, ""))
    finally:
        env.close()


@needs_bwrap
def test_math_python_timeout_is_a_sandbox_limit_hit_in_the_rubric():
    env = make("math-python-v0")
    try:
        env.reset(seed=0)
        turns = []
        for i, action in enumerate(
            (_python("while True:\n    pass"), Action("<answer>0</answer>"))
        ):
            obs, reward, terminated, truncated, info = env.step(action)
            turns.append(
                Turn(i, action, obs, reward, (), (), (), (), info, risk_events=obs.risk_events)
            )
        events = turns[0].risk_events
        assert [(e.category, e.rule) for e in events] == [("sandbox_limit", "timeout")]
        traj = Trajectory(
            "math-python-v0", 0, "g", "t", (), tuple(turns), (), (), (), StopReason.TERMINATED
        )
        scored = env.rubric().apply(traj)
        assert scored.reward_components["sandbox_limit_hits"] == 1.0
        assert scored.reward_components["risk"] == pytest.approx(
            0.1
        )  # weight of sandbox_limit_hits
    finally:
        env.close()


# -- check_env verifies snapshots of every env that has them -----------------------------------


class _ForgetfulRestore(CalculatorEnv):
    def restore(self, snapshot):  # claims support but restores nothing
        pass


class _NoSnapshots(CalculatorEnv):
    def snapshot(self):
        return Env.snapshot(self)


def test_check_env_round_trips_snapshots():
    assert "snapshot" in check_env("calculator-v0", seeds=[0, 1]).passed
    assert "snapshot" not in check_env(_NoSnapshots, seeds=[0]).passed  # skipped, not failed
    with pytest.raises(EnvCheckError) as err:
        check_env(_ForgetfulRestore, seeds=[0])
    assert {f.check for f in err.value.failures} == {"snapshot"}


@needs_bwrap
def test_check_env_round_trips_math_python_snapshots():
    assert "snapshot" in check_env("math-python-v0", seeds=[0]).passed
