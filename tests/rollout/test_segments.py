"""Context rebuilds in the rollout engine: env context resets and budget-forced elision start new
segments (rollout/context.py, "Context resets" and "Token-in/token-out consistency").

Real pieces: memory-recall-v0 (its sessions wipe the conversation), calculator-v0, the real
SmolLM2 tokenizer, a ScriptedPolicy oracle and the tiny random Llama with both schedules
(HFPolicy turn-synchronous, FastPolicy continuous).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pytest
import torch

from agentic_rl.envs import make
from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.rollout.context import ELISION_MARKER
from agentic_rl.types import StopReason

ELIDED = ELISION_MARKER.split("}", 1)[1]  # " earlier messages elided to fit the context budget]"
CALL = (
    "<tool_call>"
    + json.dumps({"name": "calculator", "arguments": {"expression": "2 + 2"}})
    + "</tool_call>"
)


class RecordingPolicy:
    """Wraps a policy; keeps every request it receives."""

    def __init__(self, inner):
        self.inner = inner
        self.requests: list[GenerationRequest] = []

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        self.requests.extend(requests)
        return self.inner.generate(requests, sampling)


def _check_stream(t, chat) -> None:
    """The turns' spans still tile the stream; every segment starts with its prompt (mask 0)
    that renders a system message first."""
    assert (
        tuple(i for turn in t.turns for i in turn.token_ids)
        == t.token_ids[: sum(len(x.token_ids) for x in t.turns)]
    )
    for start, end in t.segments:
        assert t.loss_mask[start] == 0
        assert chat.decode(t.token_ids[start:end]).startswith("<|im_start|>system\n")


@pytest.mark.parametrize(
    "kwargs, sessions", [({}, 2), ({"levels": ["update"], "num_questions": 2}, 4)]
)
def test_memory_recall_oracle_starts_a_segment_at_each_session(chat, kwargs, sessions):
    envs = [make("memory-recall-v0", **kwargs) for _ in range(2)]
    policy = RecordingPolicy(ScriptedPolicy(chat, lambda i, _ctx: envs[i].oracle_reply() or ""))
    cfg = RolloutConfig(max_turns=12, max_new_tokens=64)
    trajectories = run_episodes(policy, chat, envs, [0, 1], ["g", "g"], cfg)
    for k, t in enumerate(trajectories):
        assert t.stop_reason is StopReason.TERMINATED
        assert len(t.segment_starts) == sessions
        # a new segment starts exactly after each turn whose step reset the context
        resets = [len(turn.token_ids) for turn in t.turns]
        ends = [sum(resets[: i + 1]) for i, turn in enumerate(t.turns) if turn.context_reset]
        assert list(t.segment_starts[1:]) == ends
        _check_stream(t, chat)
        first = chat.decode(t.token_ids[: t.segment_starts[1]])
        second = chat.decode(t.token_ids[t.segment_starts[1] : (t.segments[1][1])])
        assert "tells you their profile" in first and "Session 1 of" in first
        assert "tells you their profile" not in second and "Session 1 of" not in second
        assert "Session 2 of" in second and "history was wiped" in second
        # the segment's prompt is exactly system + the new session message, rendered and encoded once
        system, session2 = t.messages[0], t.turns[0].observation.messages[0]
        prompt = chat.encode(chat.render_prompt([system, session2]))
        assert list(t.token_ids[t.segment_starts[1] : t.segment_starts[1] + len(prompt)]) == prompt
        assert set(t.loss_mask[t.segment_starts[1] : t.segment_starts[1] + len(prompt)]) == {0}
        # the policy was fed only the current segment, never the wiped session
        fed = [chat.decode(r.context_ids) for r in policy.requests if r.episode_index == k]
        assert all("tells you their profile" not in text for text in fed[1:])
        assert len({r.cache_key for r in policy.requests if r.episode_index == k}) == sessions
        # the transcript keeps every message, the wiped session included
        assert any("tells you their profile" in m.content for m in t.messages)


def test_without_resets_or_budget_there_is_one_segment(chat):
    envs = [make("calculator-v0") for _ in range(2)]
    cfg = RolloutConfig(max_turns=4, max_new_tokens=64)
    plain = run_episodes(
        ScriptedPolicy(chat, lambda i, _: envs[i].oracle_reply() or ""),
        chat,
        envs,
        [3, 4],
        ["a", "b"],
        cfg,
    )
    envs = [make("calculator-v0") for _ in range(2)]
    roomy = dataclasses.replace(cfg, context_max_tokens=4096)  # a budget that is never reached
    budgeted = run_episodes(
        ScriptedPolicy(chat, lambda i, _: envs[i].oracle_reply() or ""),
        chat,
        envs,
        [3, 4],
        ["a", "b"],
        roomy,
    )
    for a, b in zip(plain, budgeted):
        assert a.segment_starts == b.segment_starts == (0,)
        assert (a.token_ids, a.loss_mask) == (b.token_ids, b.loss_mask)


def _calculator_loop(chat, context_max_tokens: int, turns: int = 6):
    """calculator-v0 where the script calls the tool ``turns - 1`` times, then answers."""
    env = make("calculator-v0")
    _, info = env.reset(seed=3)
    calls = []

    def reply(_i, _ctx):
        calls.append(1)
        return CALL if len(calls) < turns else f"<answer>{info['expected']}</answer>"

    policy = RecordingPolicy(ScriptedPolicy(chat, reply))
    cfg = RolloutConfig(
        max_turns=turns + 2, max_new_tokens=64, context_max_tokens=context_max_tokens
    )
    (t,) = run_episodes(policy, chat, [make("calculator-v0")], [3], ["g"], cfg)
    return t, policy


def test_a_budget_forced_elision_starts_a_segment_with_the_marker(chat):
    full, _ = _calculator_loop(chat, 0)
    assert full.segment_starts == (0,) and len(full.turns) == 6
    budget = (
        len(full.turns[0].token_ids) + len(full.turns[1].token_ids) + 10
    )  # room for about 2 turns
    t, policy = _calculator_loop(chat, budget)
    assert t.stop_reason is StopReason.TERMINATED and len(t.turns) == 6
    assert len(t.segment_starts) >= 2
    _check_stream(t, chat)
    for start, end in t.segments[1:]:
        text = chat.decode(t.token_ids[start:end])
        assert ELIDED in text  # the visible marker
        assert "<|im_start|>user\n" + full.messages[1].content in text  # the task is never dropped
    # every context fed fits the budget, and is exactly the current segment up to that turn
    pos = 0
    for turn, request in zip(t.turns, policy.requests):
        sampled_at = pos + len(turn.token_ids) - turn.num_generated_tokens
        start = max(s for s in t.segment_starts if s < sampled_at)
        assert list(request.context_ids) == list(t.token_ids[start:sampled_at])
        assert len(request.context_ids) <= budget
        pos += len(turn.token_ids)
    assert len({r.cache_key for r in policy.requests}) == len(
        t.segment_starts
    )  # one cache key per segment


def test_a_budget_below_system_and_task_stops_before_any_turn(chat):
    t, policy = _calculator_loop(chat, 20)
    assert t.stop_reason is StopReason.MAX_TOKENS and not t.turns and not policy.requests


def test_rollout_config_rejects_a_negative_context_budget():
    with pytest.raises(ValueError, match="context_max_tokens"):
        RolloutConfig(context_max_tokens=-1)


# ---- the tiny model: both schedules, fresh prefill per segment, logprobs rescored per segment -----


@pytest.fixture()
def model(tiny_model_dir, chat):
    from agentic_rl.policy.model_loading import load_model
    from tests.tiny_eos import bias_toward_eos

    # replies end (the env answers them) after a few context-dependent tokens: p(eos) = 0.31 a token
    return bias_toward_eos(load_model(tiny_model_dir), chat.eos_token_id, logit=10.0)


def _tiny_runs(model, chat, temperature: float):
    from agentic_rl.policy.fast import FastPolicy
    from agentic_rl.policy.hf import HFPolicy

    cfg = RolloutConfig(
        max_turns=4, max_new_tokens=24, max_total_tokens=1024, temperature=temperature
    )
    seeds = [0, 0, 1]
    runs = []
    for policy in (
        HFPolicy(model, chat.eos_token_id, 0),
        FastPolicy(model, chat.eos_token_id, 0, max_batch=2),
    ):
        envs = [make("memory-recall-v0") for _ in seeds]
        runs.append(run_episodes(policy, chat, envs, seeds, ["a", "a", "b"], cfg, sample_seed=99))
        for env in envs:
            env.close()
    assert not policy._slot_of  # FastPolicy: every segment's KV slot was released (closed ones too)
    return runs


def test_tiny_model_both_schedules_segment_each_session_and_agree(model, chat):
    simple, fast = _tiny_runs(model, chat, temperature=1.0)
    for a, b in zip(simple, fast):
        # a random model never calls memory_search: every reply ends a session (reveal, question)
        assert len(a.turns) == 2 and a.stop_reason is StopReason.TERMINATED
        assert a.segment_starts == b.segment_starts and len(a.segment_starts) == 2
        assert (a.token_ids, a.loss_mask) == (b.token_ids, b.loss_mask)
        assert (
            max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
        )  # FastPolicy re-prefilled
        second = chat.decode(a.token_ids[a.segment_starts[1] :])
        assert "Session 2 of" in second and "tells you their profile" not in second
        _check_stream(a, chat)


def test_recorded_logprobs_match_the_trainer_segment_by_segment(model, chat):
    from agentic_rl.trainer.learning.scoring import pack, score

    _, fast = _tiny_runs(model, chat, temperature=1.0)
    with torch.no_grad():
        segmented = score(model.eval(), pack(fast))[0]
        as_one = score(
            model.eval(), pack([dataclasses.replace(t, segment_starts=(0,)) for t in fast])
        )[0]
    recorded = torch.tensor(
        [lp for t in fast for lp, m in zip(t.logprobs[1:], t.loss_mask[1:]) if m]
    )
    assert segmented.shape == recorded.shape
    assert (segmented - recorded).abs().max() < 1e-4
    # control: scoring the stream as one sequence conditions the second session on the first
    assert (as_one - recorded).abs().max() > 1e-3
