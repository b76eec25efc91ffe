"""Token-in/token-out recording of the rollout engine (DESIGN.md, decision 1).

A scripted policy plays a 3-turn calculator-v0 episode: a valid tool call, a call to an unknown
tool, then the final answer. A recording wrapper keeps every context it is fed. The test
rebuilds, by hand from ChatML, the exact text the model was shown and produced and checks the
stored token stream, its loss mask and its per-turn spans against it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import torch

from agentic_rl.algorithms import gae_advantages
from agentic_rl.envs import CalculatorEnv, make
from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.types import StopReason

SEED = 3  # level = LEVELS[3 % 3] = "direct": "<a> * <b>"


class RecordingPolicy:
    """Wraps a policy and keeps a copy of every request's context ids, per generate() call."""

    def __init__(self, inner):
        self.inner = inner
        self.contexts: list[list[int]] = []
        self.requests: list[GenerationRequest] = []  # the request objects as received

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        for r in requests:
            self.contexts.append(list(r.context_ids))
            self.requests.append(r)
        return self.inner.generate(requests, sampling)


def _turn_of(context_text: str) -> int:
    """0-based turn number = assistant headers already in the context, minus the open one."""
    return context_text.count("<|im_start|>assistant") - 1


def _replies(expression: str, answer: int) -> list[str]:
    call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
    return [
        f"Let me compute. <tool_call>{call}</tool_call>",
        '<tool_call>{"name": "abacus", "arguments": {"x": 1}}</tool_call>',
        f"The result is <answer>{answer}</answer>.",
    ]


def _runs_of_ones(mask: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of every maximal run of 1s."""
    runs, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


@pytest.fixture
def episode(chat):
    env = make("calculator-v0")
    _, info = env.reset(seed=SEED)
    replies = _replies(info["expression"], info["expected"])
    policy = RecordingPolicy(ScriptedPolicy(chat, lambda i, ctx: replies[_turn_of(ctx)]))
    env = make("calculator-v0")
    (traj,) = run_episodes(
        policy, chat, [env], [SEED], ["g"], RolloutConfig(max_turns=4, max_new_tokens=64)
    )
    return traj, policy, replies, env, info


def test_three_turn_episode_structure(episode):
    traj, policy, replies, _, info = episode
    assert traj.stop_reason == StopReason.TERMINATED
    assert len(traj.turns) == 3 and len(policy.contexts) == 3
    assert [t.action.text for t in traj.turns] == replies
    assert len(traj.turns[0].action.tool_calls) == 1
    assert traj.turns[0].tool_results[0].ok and traj.turns[0].tool_results[0].content == str(
        info["expected"]
    )
    assert not traj.turns[1].tool_results[0].ok
    assert traj.turns[2].info["correct"] is True
    assert traj.env_id == "calculator-v0" and traj.seed == SEED and traj.group_id == "g"


def test_context_fed_is_prefix_of_stored_stream(episode):
    """(a) at turn k the policy was fed exactly token_ids[:len(context_k)], and context_k ends
    where turn k's sampled tokens start."""
    traj, policy, *_ = episode
    done = 0  # tokens of the turns before k
    for k, (context, turn) in enumerate(zip(policy.contexts, traj.turns)):
        assert context == list(traj.token_ids[: len(context)]), f"turn {k}"
        n_ctx = len(turn.token_ids) - turn.num_generated_tokens
        assert len(context) == done + n_ctx
        assert list(turn.token_ids[:n_ctx]) == context[done:]
        done += len(turn.token_ids)


def test_request_context_is_not_mutated_after_the_call(episode):
    """A GenerationRequest is a frozen value: the ids it carried must not change after generate()."""
    _, policy, *_ = episode
    assert [list(r.context_ids) for r in policy.requests] == policy.contexts


def test_loss_mask_covers_exactly_the_sampled_tokens(episode, chat):
    """(b) the mask-1 spans decode to reply + <|im_end|>; everything else (template, task, tool
    results) is mask 0; scripted logprobs are 0.0."""
    traj, _, replies, *_ = episode
    runs = _runs_of_ones(traj.loss_mask)
    assert [chat.decode(traj.token_ids[a:b]) for a, b in runs] == [
        r + "<|im_end|>" for r in replies
    ]
    # the sampled ids are the ids of reply + <|im_end|> tokenized once, not a re-tokenization
    assert [list(traj.token_ids[a:b]) for a, b in runs] == [
        chat.encode(r + "<|im_end|>") for r in replies
    ]
    assert sum(traj.loss_mask) == sum(b - a for a, b in runs) == traj.num_generated_tokens
    zero_runs = _runs_of_ones([1 - m for m in traj.loss_mask])
    zero_text = [chat.decode(traj.token_ids[a:b]) for a, b in zero_runs]
    # mask-0 spans: the first prompt, then two "\n<tool message><assistant header>" continuations
    assert len(zero_text) == 3
    assert zero_text[0].startswith("<|im_start|>system\n") and zero_text[0].endswith(
        "<|im_start|>assistant\n"
    )
    for text in zero_text[1:]:
        assert text.startswith("\n<|im_start|>tool\n") and text.endswith(
            "<|im_end|>\n<|im_start|>assistant\n"
        )
    assert not any(r in t for r in replies for t in zero_text)
    assert set(traj.logprobs) == {0.0}


def test_decoded_stream_equals_chatml_by_hand(episode, chat):
    """(c) decode(token_ids) is exactly the ChatML text of the conversation."""
    traj, _, replies, env, info = episode
    system, question = env.system_prompt, env.task.question
    result1 = str(info["expected"])
    result2 = "Error: unknown tool 'abacus'. Available tools: calculator"
    expected = (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{question}<|im_end|>\n"
        f"<|im_start|>assistant\n{replies[0]}<|im_end|>"
        f"\n<|im_start|>tool\n{result1}<|im_end|>\n"
        f"<|im_start|>assistant\n{replies[1]}<|im_end|>"
        f"\n<|im_start|>tool\n{result2}<|im_end|>\n"
        f"<|im_start|>assistant\n{replies[2]}<|im_end|>"
    )
    assert chat.decode(traj.token_ids) == expected
    assert [(m.role, m.content) for m in traj.messages] == [
        ("system", system),
        ("user", question),
        ("assistant", replies[0]),
        ("tool", result1),
        ("assistant", replies[1]),
        ("tool", result2),
        ("assistant", replies[2]),
    ]


def test_turn_spans_concatenate_to_the_stream(episode):
    """(d) the turns' spans, in order, are the whole stream (no trailing env tokens after a final answer)."""
    traj, *_ = episode
    assert sum((t.token_ids for t in traj.turns), ()) == traj.token_ids
    assert sum((t.loss_mask for t in traj.turns), ()) == traj.loss_mask
    assert sum((t.logprobs for t in traj.turns), ()) == traj.logprobs
    for t in traj.turns:
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        # each span: context (mask 0) then sampled tokens (mask 1), never interleaved
        n = t.num_generated_tokens
        assert t.loss_mask == (0,) * (len(t.loss_mask) - n) + (1,) * n


class StepSpy(CalculatorEnv):
    """calculator-v0 that records every action it was stepped with."""

    env_id = "step-spy-v0"

    def __init__(self):
        super().__init__()
        self.actions = []

    def step(self, action):
        self.actions.append(action)
        return super().step(action)


def _long_answer(expected: int) -> str:
    return (
        "Let me explain every single step of this computation in great detail, " * 3
        + f"<answer>{expected}</answer>"
    )


def test_cut_final_answer_is_not_scored_and_ends_the_episode_truncated(chat):
    """(e) max_new_tokens=16 and a final answer longer than that: the cut text is not handed to
    the env as the answer; the turn is marked truncated and the episode ends MAX_NEW_TOKENS."""
    env = StepSpy()
    _, info = env.reset(seed=SEED)
    answer = _long_answer(info["expected"])
    assert len(chat.encode(answer)) > 16
    (traj,) = run_episodes(
        ScriptedPolicy(chat, lambda i, ctx: answer),
        chat,
        [env],
        [SEED],
        ["g"],
        RolloutConfig(max_turns=4, max_new_tokens=16),
    )
    assert traj.stop_reason == StopReason.MAX_NEW_TOKENS and traj.truncated and not traj.terminated
    assert env.actions == []  # the env never scored the cut text
    (cut,) = traj.turns
    assert cut.truncated and cut.num_generated_tokens == 16 and cut.reward == 0.0
    assert cut.observation is None and cut.tool_results == () and cut.info == {}
    assert (
        list(traj.token_ids[-16:]) == chat.encode(answer)[:16] and traj.loss_mask[-16:] == (1,) * 16
    )
    assert chat.decode(traj.token_ids[-16:]) == cut.action.text == traj.messages[-1].content
    assert cut.token_ids == traj.token_ids  # nothing appended after the cut (no <|im_end|>)
    # GAE (as trainer/learning/update.py's _gae calls it): a truncated row bootstraps from V at its end.
    # gamma = lam = 1, rewards 0, V = 0.5 everywhere: A = 0 + 0.5 - 0.5 = 0 on every step;
    # had the episode counted as terminated, A_last = 0 + 0 - 0.5 = -0.5.
    mask = torch.tensor([traj.loss_mask], dtype=torch.bool)
    adv, _ = gae_advantages(
        torch.zeros(mask.shape),
        torch.full(mask.shape, 0.5),
        mask,
        gamma=1.0,
        lam=1.0,
        terminated=[traj.terminated],
        bootstrap_values=[0.5],
    )
    assert adv.abs().max() == 0.0


def test_cut_reply_after_a_tool_turn(chat):
    """A closed tool-call turn is stepped as usual; the next reply, cut at max_new_tokens, is not."""
    env = StepSpy()
    _, info = env.reset(seed=SEED)
    call = json.dumps({"name": "calculator", "arguments": {"expression": info["expression"]}})
    replies = [f"<tool_call>{call}</tool_call>", _long_answer(info["expected"])]
    assert len(chat.encode(replies[0] + "<|im_end|>")) <= 40 < len(chat.encode(replies[1]))
    policy = ScriptedPolicy(chat, lambda i, ctx: replies[_turn_of(ctx)])
    (traj,) = run_episodes(
        policy, chat, [env], [SEED], ["g"], RolloutConfig(max_turns=4, max_new_tokens=40)
    )
    assert traj.stop_reason == StopReason.MAX_NEW_TOKENS
    assert [a.text for a in env.actions] == [replies[0]]
    first, cut = traj.turns
    assert not first.truncated and first.tool_results[0].ok and first.observation is not None
    assert cut.truncated and cut.num_generated_tokens == 40
    assert sum((t.token_ids for t in traj.turns), ()) == traj.token_ids


def test_reply_cut_by_the_total_budget_ends_max_tokens_without_a_step(chat):
    env = StepSpy()
    obs, _ = env.reset(seed=SEED)
    prompt = len(chat.encode(chat.render_prompt(obs.messages)))
    config = RolloutConfig(max_turns=4, max_new_tokens=64, max_total_tokens=prompt + 5)
    (traj,) = run_episodes(
        ScriptedPolicy(chat, lambda i, ctx: "The answer is <answer>12</answer>."),
        chat,
        [env],
        [SEED],
        ["g"],
        config,
    )
    assert traj.stop_reason == StopReason.MAX_TOKENS and env.actions == []
    assert traj.turns[0].truncated and traj.turns[0].num_generated_tokens == 5
