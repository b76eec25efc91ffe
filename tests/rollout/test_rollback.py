"""Rolling an episode back to an earlier turn: env state (replay or snapshots) and a consistent cut."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.base import Env, SnapshotNotSupportedError
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import run_episodes
from agentic_rl.rollout.engine import RolloutConfig
from agentic_rl.rollout.rollback import ReplayMismatchError, rollback, truncate_trajectory
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.types import Message, Observation, StopReason
from tests.markers import BWRAP_SKIP_REASON
from tests.tools.python_env import PythonScratchEnv

CONFIG = RolloutConfig(max_turns=5, max_new_tokens=64, max_total_tokens=4096)


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _turn_of(context):
    return context.count("<|im_start|>assistant") - 1


class RecordingPolicy(ScriptedPolicy):
    """Scripted replies; remembers the context fed before each turn."""

    def __init__(self, chat, replies):
        super().__init__(chat, lambda i, ctx: replies[_turn_of(ctx)])
        self.contexts = []

    def generate(self, requests, sampling):
        self.contexts.extend(tuple(r.context_ids) for r in requests)
        return super().generate(requests, sampling)


CALC_REPLIES = [
    _call("calculator", expression="2 + 3"),
    _call("calculator", expression="6 * 7"),
    "<answer>0</answer>",
]


def _calculator_episode(chat, env):
    policy = RecordingPolicy(chat, CALC_REPLIES)
    (traj,) = run_episodes(policy, chat, [env], [4], ["g"], CONFIG)
    assert traj.stop_reason == StopReason.TERMINATED and len(traj.turns) == 3
    return traj, policy.contexts


def test_cut_is_exactly_what_the_policy_was_fed_before_turn_k(chat):
    traj, contexts = _calculator_episode(chat, make("calculator-v0"))
    for k in range(3):
        cut = truncate_trajectory(traj, k)
        assert cut.token_ids == contexts[k]  # the context of turn k, token for token
        n = len(cut.token_ids)
        assert cut.loss_mask == traj.loss_mask[:n] and cut.logprobs == traj.logprobs[:n]
        assert cut.loss_mask[-1] == 0 and len(cut.turns) == k
        # length worked out by hand: spans of the kept turns + the leading mask-0 run of turn k
        span = sum(len(t.token_ids) for t in traj.turns[:k])
        assert n == span + traj.turns[k].loss_mask.index(1)
        assert cut.num_generated_tokens == sum(t.num_generated_tokens for t in traj.turns[:k])
        assert [m.role for m in cut.messages] == ["system", "user"] + ["assistant", "tool"] * k
        assert cut.messages == traj.messages[: len(cut.messages)]
        assert (
            cut.reward is None
            and cut.reward_components == {}
            and cut.stop_reason == StopReason.MAX_TURNS
        )
        assert cut.info["rollback"] == {"from_turns": 3, "to_turns": k}
    assert truncate_trajectory(traj, 3) is traj
    for bad in (-1, 4, 1.0, True):
        with pytest.raises(ValueError, match="0..3"):
            truncate_trajectory(traj, bad)


def test_inconsistent_trajectory_is_rejected(chat):
    traj, _ = _calculator_episode(chat, make("calculator-v0"))
    broken = dataclasses.replace(traj, token_ids=(traj.token_ids[0] + 1,) + traj.token_ids[1:])
    with pytest.raises(ValueError, match="token stream"):
        truncate_trajectory(broken, 1)
    with pytest.raises(ValueError, match="messages do not match"):
        truncate_trajectory(dataclasses.replace(traj, messages=traj.messages[:2]), 1)


def test_replay_brings_the_env_to_turn_k(chat):
    traj, _ = _calculator_episode(chat, make("calculator-v0"))
    env = make("calculator-v0")
    cut = rollback(env, traj, 1)
    assert len(cut.turns) == 1
    # the env continues exactly as it did in the recorded episode
    obs, reward, terminated, _, _ = env.step(traj.turns[1].action)
    assert obs == traj.turns[1].observation and not terminated
    obs, reward, terminated, _, _ = env.step(traj.turns[2].action)
    assert terminated and reward == traj.turns[2].reward
    rollback(env, traj, 0)  # back to just after reset
    assert env.oracle_reply().startswith("<tool_call>")


def test_replay_mismatch_is_an_error(chat):
    traj, _ = _calculator_episode(chat, make("calculator-v0"))
    with pytest.raises(ReplayMismatchError, match="first observation"):
        rollback(make("calculator-v0"), dataclasses.replace(traj, seed=5), 1)
    forged = dataclasses.replace(traj.turns[0], observation=Observation((Message("tool", "6"),)))
    with pytest.raises(ReplayMismatchError, match="turn 0: observation differs"):
        rollback(
            make("calculator-v0"), dataclasses.replace(traj, turns=(forged,) + traj.turns[1:]), 2
        )
    with pytest.raises(ValueError, match="cannot roll back"):
        rollback(_Renamed(), traj, 1)


class _Renamed(Env):  # an env of another id, without snapshot support
    env_id = "other-v0"

    def reset(self, seed=None, options=None):
        raise AssertionError

    def step(self, action):
        raise AssertionError

    def rubric(self, weights=None):
        raise AssertionError


def _snapshots(env, traj):
    """``env.snapshot()`` after reset and after each recorded turn of ``traj`` (played again)."""
    env.reset(seed=traj.seed, options={"trajectory_id": traj.trajectory_id})
    snapshots = [env.snapshot()]
    for turn in traj.turns:
        env.step(turn.action)
        snapshots.append(env.snapshot())
    return snapshots


def test_snapshots_bring_the_env_to_turn_k(chat):
    env = make("calculator-v0")
    traj, _ = _calculator_episode(chat, env)
    snapshots = _snapshots(env, traj)  # the env has ended its episode again
    assert len(snapshots) == 4
    cut = rollback(env, traj, 2, snapshots=snapshots)
    assert len(cut.turns) == 2
    _, reward, terminated, _, _ = env.step(traj.turns[2].action)
    assert terminated and reward == 0.0  # "<answer>0</answer>" is wrong for 4's task, as recorded
    with pytest.raises(ValueError, match="needs snapshots\\[2\\]"):
        rollback(env, traj, 2, snapshots=snapshots[:2])


def test_envs_without_snapshots_say_so(chat):
    env = _Renamed()
    with pytest.raises(SnapshotNotSupportedError, match="other-v0"):
        env.snapshot()
    with pytest.raises(NotImplementedError, match="other-v0"):
        env.restore(None)


# -- a sandboxed env: interpreter variables and files at turn k --------------------------------


@pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(), reason=BWRAP_SKIP_REASON
)
@pytest.mark.parametrize("mode", ["snapshots", "replay"])
def test_rollback_of_a_sandboxed_episode(chat, mode):
    replies = [
        _call("python", code="x = 1\nopen('f.txt', 'w').write('one')"),
        _call("python", code="x += 10\nopen('f.txt', 'w').write('two')"),
        _call("python", code="x"),
        "<answer>21</answer>",
    ]
    env = PythonScratchEnv(config=SandboxConfig(timeout_s=3.0))
    env.env_id = "python-scratch-v0"
    try:
        (traj,) = run_episodes(
            ScriptedPolicy(chat, lambda i, ctx: replies[_turn_of(ctx)]),
            chat,
            [env],
            [3],
            ["g"],
            CONFIG,
        )
        assert traj.turns[2].tool_results[0].content == "Out: 11"
        snapshots = _snapshots(env, traj) if mode == "snapshots" else None
        cut = rollback(env, traj, 1, snapshots=snapshots)
        assert len(cut.turns) == 1
        obs, *_ = env.step(traj.turns[2].action)  # "x" after turn 1 only
        assert obs.messages[0].content == "Out: 1"
        assert (env.sandboxed.sandbox.workspace / "f.txt").read_text() == "one"
    finally:
        env.close()
