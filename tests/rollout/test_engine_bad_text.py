"""Text that would break the tokenizer or the parser never ends a run (issue 19, items 2 and 16).

Tool output with a lone surrogate, ``"\\ud800"`` escapes and 5,000-digit integers in a tool call's
JSON used to raise out of ``run_episodes``; an env's own invalid text now fails its episode only.
"""

from __future__ import annotations

import json

from agentic_rl.envs import CalculatorEnv, make
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trajectories.serialize import trajectory_to_record
from agentic_rl.trajectories.store import TrajectoryStore
from agentic_rl.types import Message, Observation, StopReason


def _call(name: str, arguments_json: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments_json}}}</tool_call>'


def _turn_of(context_text: str) -> int:
    return context_text.count("<|im_start|>assistant") - 1


class FeedbackWithSurrogate(CalculatorEnv):
    """A buggy env: its own feedback text holds a lone surrogate."""

    env_id = "feedback-surrogate-v0"

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return (
            Observation((Message("user", "bad \ud800 feedback"),)),
            reward,
            terminated,
            truncated,
            info,
        )


class TaskWithSurrogate(CalculatorEnv):
    """A buggy env: its task text holds a lone surrogate."""

    env_id = "task-surrogate-v0"

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed, options)
        return Observation((*obs.messages, Message("user", "\udfff"))), info


def test_python_tool_printing_a_lone_surrogate_does_not_end_the_batch(chat, tmp_path):
    """math-python-v0: ``print(chr(0xd800))`` raised TypeError in the tokenizer, outside every guard."""
    envs = [make("math-python-v0") for _ in range(2)]
    bad_call = _call("python", json.dumps({"code": "print(chr(0xd800), 'x')"}))

    def reply(i, ctx):
        return bad_call if i == 0 and _turn_of(ctx) == 0 else envs[i].oracle_reply() or ""

    try:
        trajs = run_episodes(
            ScriptedPolicy(chat, reply),
            chat,
            envs,
            [0, 1],
            ["a", "b"],
            RolloutConfig(max_turns=3, max_new_tokens=128, max_total_tokens=1536),
        )
    finally:
        for env in envs:
            env.close()
    assert [t.stop_reason for t in trajs] == [StopReason.TERMINATED] * 2
    assert not any(t.failed for t in trajs)
    shown = trajs[0].turns[0].tool_results[0].content
    assert "\ud800" not in shown and "x" in shown
    assert (
        TrajectoryStore(tmp_path / "store").append([trajectory_to_record(t) for t in trajs]) == 2
    )  # the store takes them too


def test_surrogate_escapes_and_huge_integers_in_tool_calls_are_observations(chat):
    """A 5,000-digit integer made json raise ValueError out of the parser, and so out of the engine."""
    calls = [
        _call("calculator", '{"expression": "2+2\\ud800"}'),
        _call("calculator", '{"expression": ' + "9" * 5000 + "}"),
        _call("calculator\\udfff", "{}"),
    ]
    envs = [make("calculator-v0") for _ in calls]

    def reply(i, ctx):
        return calls[i] if _turn_of(ctx) == 0 else envs[i].oracle_reply() or ""

    config = RolloutConfig(
        max_new_tokens=6000, max_total_tokens=8192
    )  # room for 5,000 digits in one reply
    trajs = run_episodes(
        ScriptedPolicy(chat, reply), chat, envs, [0, 1, 2], ["a", "b", "c"], config
    )
    assert [t.stop_reason for t in trajs] == [StopReason.TERMINATED] * 3
    results = [t.turns[0].tool_results[0] for t in trajs]
    assert not any(r.ok for r in results)
    assert "5000 digits" in results[1].content
    assert "\ufffd" in results[2].content  # the unknown tool's name, as valid text
    assert all(t.turns[-1].info["correct"] for t in trajs)


def test_env_text_the_tokenizer_rejects_fails_only_its_episode(chat):
    envs = [FeedbackWithSurrogate(), make("calculator-v0"), TaskWithSurrogate()]
    trajs = run_episodes(
        ScriptedPolicy(chat, lambda i, ctx: envs[i].oracle_reply() or ""),
        chat,
        envs,
        [0, 1, 2],
        ["a", "b", "c"],
        RolloutConfig(),
    )
    bad_step, good, bad_reset = trajs
    for bad in (bad_step, bad_reset):
        assert bad.stop_reason == StopReason.ERROR and bad.failed
        assert bad.failure.startswith("tokenizing the observation raised")
    assert len(bad_step.turns) == 1 and bad_reset.turns == ()
    assert good.stop_reason == StopReason.TERMINATED and good.turns[-1].info["correct"]
