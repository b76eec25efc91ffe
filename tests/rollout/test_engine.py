"""The rollout engine's budgets, error isolation and argument checks (scripted policies, real tokenizer)."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs import CalculatorEnv, make
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.types import StopReason

CALL = (
    "<tool_call>"
    + json.dumps({"name": "calculator", "arguments": {"expression": "2 + 2"}})
    + "</tool_call>"
)


def _turn_of(context_text: str) -> int:
    return context_text.count("<|im_start|>assistant") - 1


def _oracle(envs):
    return lambda i, _ctx: envs[i].oracle_reply() or ""


class StepRaises(CalculatorEnv):
    env_id = "step-raises-v0"

    def step(self, action):
        raise RuntimeError("boom")


class ResetRaises(CalculatorEnv):
    env_id = "reset-raises-v0"

    def reset(self, seed=None, options=None):
        raise OSError("no sandbox")


def test_oracle_episodes_terminate(chat):
    envs = [make("calculator-v0") for _ in range(3)]
    trajs = run_episodes(
        ScriptedPolicy(chat, _oracle(envs)), chat, envs, [0, 1, 2], ["a", "b", "c"], RolloutConfig()
    )
    assert [t.stop_reason for t in trajs] == [StopReason.TERMINATED] * 3
    assert [len(t.turns) for t in trajs] == [2, 2, 2]  # tool call, then the answer
    assert [t.seed for t in trajs] == [0, 1, 2] and [t.group_id for t in trajs] == ["a", "b", "c"]
    assert all(t.turns[-1].info["correct"] and t.turns[-1].reward == 1.0 for t in trajs)
    assert [t.info["level"] for t in trajs] == ["direct", "multi_op", "word"]  # reset info is kept
    assert len({t.trajectory_id for t in trajs}) == 3


def test_max_turns_budget(chat):
    """A policy that only ever calls the tool is stopped after max_turns turns."""
    (traj,) = run_episodes(
        ScriptedPolicy(chat, lambda i, ctx: CALL),
        chat,
        [make("calculator-v0")],
        [0],
        ["g"],
        RolloutConfig(max_turns=3),
    )
    assert traj.stop_reason == StopReason.MAX_TURNS
    assert traj.truncated and not traj.terminated and not traj.failed
    assert len(traj.turns) == 3
    assert all(t.tool_results[0].content == "4" for t in traj.turns)
    # the stream ends with the last sampled reply: no dangling tool message or header after a budget stop
    assert traj.loss_mask[-1] == 1
    # the tool of the last turn did run: its result is on the turn (not shown to the policy)
    assert traj.turns[-1].observation.messages[0].content == "4"


def test_max_total_tokens_budget(chat):
    """The whole stream never exceeds max_total_tokens; the episode stops with MAX_TOKENS."""
    env = make("calculator-v0")
    obs, _ = env.reset(seed=0)
    prompt_len = len(chat.encode(chat.render_prompt(obs.messages)))
    reply_len = len(chat.encode(CALL + "<|im_end|>"))
    budget = prompt_len + 2 * reply_len + 5  # room for one full turn and a bit, not for two
    config = RolloutConfig(max_turns=10, max_new_tokens=64, max_total_tokens=budget)
    (traj,) = run_episodes(
        ScriptedPolicy(chat, lambda i, ctx: CALL), chat, [make("calculator-v0")], [0], ["g"], config
    )
    assert traj.stop_reason == StopReason.MAX_TOKENS and traj.truncated
    assert len(traj.token_ids) <= budget
    assert 1 <= len(traj.turns) < 10


def test_prompt_longer_than_budget_stops_before_any_turn(chat):
    config = RolloutConfig(max_total_tokens=10)
    calls = []
    policy = ScriptedPolicy(chat, lambda i, ctx: calls.append(i) or CALL)
    (traj,) = run_episodes(policy, chat, [make("calculator-v0")], [0], ["g"], config)
    assert traj.stop_reason == StopReason.MAX_TOKENS
    assert traj.turns == () and calls == []
    assert traj.num_generated_tokens == 0


def test_per_request_token_budget_never_exceeds_total(chat):
    """max_new_tokens of each request is cut to what is left of max_total_tokens."""
    seen = []

    class Spy(ScriptedPolicy):
        def generate(self, requests, sampling):
            seen.extend((len(r.context_ids), r.max_new_tokens) for r in requests)
            return super().generate(requests, sampling)

    env = make("calculator-v0")
    obs, _ = env.reset(seed=0)
    prompt_len = len(chat.encode(chat.render_prompt(obs.messages)))
    config = RolloutConfig(max_new_tokens=64, max_total_tokens=prompt_len + 10)
    (traj,) = run_episodes(
        Spy(chat, lambda i, ctx: CALL), chat, [make("calculator-v0")], [0], ["g"], config
    )
    assert seen[0] == (prompt_len, 10)
    assert all(length + budget <= config.max_total_tokens for length, budget in seen)
    assert traj.turns[0].num_generated_tokens == 10


def test_env_step_error_fails_only_its_episode(chat):
    envs = [make("calculator-v0"), StepRaises(), make("calculator-v0")]
    trajs = run_episodes(
        ScriptedPolicy(chat, _oracle(envs)), chat, envs, [0, 1, 2], ["a", "b", "c"], RolloutConfig()
    )
    good0, bad, good2 = trajs
    assert bad.stop_reason == StopReason.ERROR and bad.failed
    assert bad.failure == "step raised RuntimeError: boom"
    assert len(bad.turns) == 1 and bad.turns[0].observation is None
    for t in (good0, good2):
        assert t.stop_reason == StopReason.TERMINATED and not t.failed
        assert t.turns[-1].info["correct"] is True


def test_env_reset_error_fails_only_its_episode(chat):
    envs = [ResetRaises(), make("calculator-v0")]
    trajs = run_episodes(
        ScriptedPolicy(chat, _oracle(envs)), chat, envs, [0, 1], ["a", "b"], RolloutConfig()
    )
    assert trajs[0].stop_reason == StopReason.ERROR
    assert trajs[0].failure == "reset raised OSError: no sandbox"
    assert trajs[0].turns == () and trajs[0].token_ids == ()
    assert trajs[1].stop_reason == StopReason.TERMINATED


def test_same_env_instance_twice_is_rejected(chat):
    env = make("calculator-v0")
    with pytest.raises(ValueError, match="own env instance"):
        run_episodes(
            ScriptedPolicy(chat, lambda i, c: ""),
            chat,
            [env, env],
            [0, 0],
            ["g", "g"],
            RolloutConfig(),
        )


def test_length_mismatch_is_rejected(chat):
    with pytest.raises(ValueError, match="same length"):
        run_episodes(
            ScriptedPolicy(chat, lambda i, c: ""),
            chat,
            [make("calculator-v0")],
            [0, 1],
            ["g"],
            RolloutConfig(),
        )


@pytest.mark.parametrize(
    "bad_reply, expected_prefix",
    [
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"</tool_call>',
            "Error: could not parse tool call: invalid JSON",
        ),
        (
            '<tool_call>{"name": "abacus", "arguments": {"x": 1}}</tool_call>',
            "Error: unknown tool 'abacus'. Available tools: calculator",
        ),
        ('<tool_call>{"name": "calculator", "arguments": {"expr": "2+2"}}</tool_call>', "Error: "),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "2 +* 2"}}</tool_call>',
            "Error: CalculatorError: invalid syntax",
        ),
    ],
)
def test_bad_tool_calls_become_observations(chat, bad_reply, expected_prefix):
    """A bad call is shown to the policy as an error tool message; the episode goes on."""
    env = make("calculator-v0")
    answer = f"<answer>{env.reset(seed=0)[1]['expected']}</answer>"
    replies = [bad_reply, answer]
    (traj,) = run_episodes(
        ScriptedPolicy(chat, lambda i, ctx: replies[_turn_of(ctx)]),
        chat,
        [env],
        [0],
        ["g"],
        RolloutConfig(),
    )
    assert traj.stop_reason == StopReason.TERMINATED and not traj.failed
    first = traj.turns[0]
    assert len(first.tool_results) == 1 and not first.tool_results[0].ok
    assert first.tool_results[0].content.startswith(expected_prefix)
    assert first.observation.messages[0].role == "tool"
    assert first.observation.messages[0].content == first.tool_results[0].content
    assert first.info["tool_errors"] == 1
    assert (
        traj.messages[3].content == first.tool_results[0].content
    )  # system, user, assistant, tool
    assert chat.decode(traj.token_ids).count(first.tool_results[0].content) == 1
    assert traj.turns[1].info["correct"] is True


def test_empty_reply_is_a_final_wrong_answer(chat):
    (traj,) = run_episodes(
        ScriptedPolicy(chat, lambda i, c: ""),
        chat,
        [make("calculator-v0")],
        [0],
        ["g"],
        RolloutConfig(),
    )
    assert traj.stop_reason == StopReason.TERMINATED
    assert traj.turns[0].reward == 0.0 and traj.turns[0].info["answer"] is None
    assert traj.turns[0].num_generated_tokens == 1  # just <|im_end|>


def test_rollout_config_rejects_bad_budgets():
    for kwargs in ({"max_turns": 0}, {"max_new_tokens": 0}, {"max_total_tokens": 1}):
        with pytest.raises(ValueError):
            RolloutConfig(**kwargs)
