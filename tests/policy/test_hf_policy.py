"""HFPolicy on a tiny random Llama: determinism, recorded logprobs = trainer logprobs, left padding,
seeded sampling, per-request budgets and the end-of-turn flag."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.policy.base import GenerationRequest, SamplingParams
from agentic_rl.policy.hf import HFPolicy
from agentic_rl.policy.model_loading import load_model
from agentic_rl.trainer.learning.scoring import pack, score
from agentic_rl.types import StopReason, Trajectory

GREEDY = SamplingParams(greedy=True)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def contexts(chat):
    texts = [
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
        "Hi",
        "<|im_start|>system\nYou are a helpful assistant with a calculator.<|im_end|>\n"
        "<|im_start|>user\nCompute 347 * 28 and tell me the result please.<|im_end|>\n<|im_start|>assistant\n",
    ]
    ids = [chat.encode(t) for t in texts]
    assert len({len(i) for i in ids}) == 3  # different lengths: the batch needs left padding
    return ids


def _policy(model, chat, tokenizer, **kwargs) -> HFPolicy:
    return HFPolicy(model, chat.eos_token_id, tokenizer.pad_token_id, **kwargs)


def _stream(context, generation) -> Trajectory:
    """A trajectory-like stream: context (mask 0) + generated ids (mask 1, recorded logprobs)."""
    ids = tuple(context) + generation.token_ids
    mask = (0,) * len(context) + (1,) * len(generation.token_ids)
    logprobs = (0.0,) * len(context) + generation.logprobs
    return Trajectory("x-v0", 0, "g", "t", (), (), ids, mask, logprobs, StopReason.TERMINATED)


def test_greedy_is_deterministic(model, chat, tokenizer, contexts):
    policy = _policy(model, chat, tokenizer)
    requests = [GenerationRequest(c, 6, i) for i, c in enumerate(contexts)]
    a = policy.generate(requests, GREEDY)
    b = policy.generate(requests, GREEDY)
    assert a == b
    for gen in a:
        assert len(gen.token_ids) == len(gen.logprobs) >= 1
        assert all(lp <= 0.0 for lp in gen.logprobs)


def test_greedy_picks_the_argmax(model, chat, tokenizer, contexts):
    policy = _policy(model, chat, tokenizer)
    (gen,) = policy.generate([GenerationRequest(contexts[0], 1)], GREEDY)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([contexts[0]])).logits[0, -1]
    assert gen.token_ids[0] == int(logits.argmax())
    assert gen.logprobs[0] == pytest.approx(float(torch.log_softmax(logits, -1).max()), abs=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recorded_logprobs_equal_trainer_scores(model, chat, tokenizer, contexts, temperature):
    """The logprob recorded at sampling equals the trainer's score of the same token stream."""
    policy = _policy(model, chat, tokenizer, generator=torch.Generator().manual_seed(0))
    sampling = SamplingParams(temperature=temperature)
    gens = policy.generate([GenerationRequest(c, 7, i) for i, c in enumerate(contexts)], sampling)
    streams = [_stream(c, g) for c, g in zip(contexts, gens)]
    batch = pack(streams)
    recorded = torch.tensor([lp for g in gens for lp in g.logprobs])
    assert torch.equal(batch.old_logprobs, recorded)  # pack keeps the recorded values row-major
    with torch.no_grad():
        trainer_logprobs, _ = score(model, batch, temperature=temperature)
    assert trainer_logprobs.shape == recorded.shape
    torch.testing.assert_close(trainer_logprobs, recorded, atol=1e-4, rtol=0)


def test_left_padding_does_not_change_results(model, chat, tokenizer, contexts):
    """Batched generation (left-padded, rows leaving at different times) = one request at a time."""
    policy = _policy(model, chat, tokenizer)
    limits = [3, 9, 5]
    requests = [GenerationRequest(c, n, i) for i, (c, n) in enumerate(zip(contexts, limits))]
    batched = policy.generate(requests, GREEDY)
    for request, gen in zip(requests, batched):
        (alone,) = policy.generate([request], GREEDY)
        assert gen.token_ids == alone.token_ids
        assert gen.finished == alone.finished
        torch.testing.assert_close(
            torch.tensor(gen.logprobs), torch.tensor(alone.logprobs), atol=1e-4, rtol=0
        )


def test_seeded_sampling_is_reproducible(model, chat, tokenizer, contexts):
    requests = [GenerationRequest(c, 8, i) for i, c in enumerate(contexts)]
    runs = [
        _policy(model, chat, tokenizer, generator=torch.Generator().manual_seed(seed)).generate(
            requests, SamplingParams()
        )
        for seed in (123, 123, 124)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_each_max_new_tokens_is_respected(model, chat, tokenizer, contexts):
    policy = _policy(model, chat, tokenizer, generator=torch.Generator().manual_seed(1))
    limits = [1, 4, 11]
    gens = policy.generate(
        [GenerationRequest(c, n, i) for i, (c, n) in enumerate(zip(contexts, limits))],
        SamplingParams(),
    )
    for gen, n in zip(gens, limits):
        if gen.finished:
            assert len(gen.token_ids) <= n and gen.token_ids[-1] == chat.eos_token_id
        else:
            assert len(gen.token_ids) == n and chat.eos_token_id not in gen.token_ids


def test_finished_when_eos_is_sampled(model, chat, tokenizer, contexts):
    """Declare the token greedy decoding picks first as end-of-turn: that row stops at once, finished."""
    plain = _policy(model, chat, tokenizer)
    first = plain.generate([GenerationRequest(contexts[0], 1)], GREEDY)[0].token_ids[0]
    policy = HFPolicy(model, eos_token_id=first, pad_token_id=tokenizer.pad_token_id)
    gens = policy.generate(
        [GenerationRequest(contexts[0], 10, 0), GenerationRequest(contexts[2], 4, 1)], GREEDY
    )
    assert gens[0].token_ids == (first,) and gens[0].finished
    other = plain.generate([GenerationRequest(contexts[2], 4)], GREEDY)[0]
    if first not in other.token_ids:  # the other row is unaffected and runs to its budget
        assert gens[1].token_ids == other.token_ids and not gens[1].finished


def test_train_mode_is_restored(tiny_model_dir, chat, tokenizer, contexts):
    model = load_model(tiny_model_dir).train()
    _policy(model, chat, tokenizer).generate([GenerationRequest(contexts[1], 2)], GREEDY)
    assert model.training
    model.eval()
    _policy(model, chat, tokenizer).generate([GenerationRequest(contexts[1], 2)], GREEDY)
    assert not model.training


def test_bad_requests(model, chat, tokenizer):
    policy = _policy(model, chat, tokenizer)
    assert policy.generate([], GREEDY) == []
    with pytest.raises(ValueError):
        policy.generate([GenerationRequest([], 4)], GREEDY)
    with pytest.raises(ValueError):
        policy.generate([GenerationRequest([1, 2], 0)], GREEDY)
    with pytest.raises(ValueError):
        SamplingParams(temperature=0.0)


def _rollout_and_score(model, chat, tokenizer, n: int, max_new_tokens: int, temperature: float):
    from agentic_rl.envs import make
    from agentic_rl.rollout import RolloutConfig, run_episodes

    policy = _policy(model, chat, tokenizer, generator=torch.Generator().manual_seed(0))
    config = RolloutConfig(max_turns=2, max_new_tokens=max_new_tokens, temperature=temperature)
    envs = [make("calculator-v0") for _ in range(n)]
    trajs = run_episodes(policy, chat, envs, list(range(n)), ["g"] * n, config)
    batch = pack(trajs)
    with torch.no_grad():
        scored, _ = score(model, batch, temperature=temperature)
    return trajs, batch, scored


def test_engine_trajectories_score_to_their_recorded_logprobs(model, chat, tokenizer):
    """End to end: batched rollouts of different prompt lengths, stored, packed and re-scored by
    the trainer give back the sampler's logprobs (no re-tokenization anywhere)."""
    trajs, batch, scored = _rollout_and_score(
        model, chat, tokenizer, n=4, max_new_tokens=6, temperature=0.8
    )
    assert len({len(t.token_ids) for t in trajs}) > 1
    assert batch.num_tokens == sum(t.num_generated_tokens for t in trajs)
    torch.testing.assert_close(scored, batch.old_logprobs, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_smollm2_rollouts_score_to_their_recorded_logprobs(model_dir, chat, tokenizer):
    real = load_model(model_dir)
    trajs, batch, scored = _rollout_and_score(
        real, chat, tokenizer, n=4, max_new_tokens=32, temperature=1.0
    )
    assert batch.num_tokens > 0
    torch.testing.assert_close(scored, batch.old_logprobs, atol=1e-3, rtol=0)
    assert float((scored - batch.old_logprobs).abs().mean()) < 1e-4


# -- KV reuse: per-episode caches across turns and a shared prompt prefix ---------------------


def _reference(model, chat, tokenizer) -> HFPolicy:
    """A policy that re-encodes every context from scratch (no per-episode or shared-prefix KV)."""
    return _policy(model, chat, tokenizer, reuse_cache=False, min_shared_prefix=10**9)


def _assert_same(gens, refs):
    for gen, ref in zip(gens, refs):
        assert gen.token_ids == ref.token_ids and gen.finished == ref.finished
        torch.testing.assert_close(
            torch.tensor(gen.logprobs), torch.tensor(ref.logprobs), atol=1e-4, rtol=0
        )


def test_cached_turn_equals_fresh_encoding(model, chat, tokenizer, contexts):
    """Turn 2 extends turn 1's context + sampled ids: with the episode's cache only the new tokens are
    encoded, and the result equals encoding the whole context from scratch."""
    policy = _policy(model, chat, tokenizer)
    first = policy.generate(
        [GenerationRequest(contexts[0], 5, 0, "a"), GenerationRequest(contexts[2], 3, 1, "b")],
        GREEDY,
    )
    # the cache holds the context and all but the last sampled token
    assert policy._cache["a"].ids == contexts[0] + list(first[0].token_ids[:-1])
    tool = chat.encode("\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n")
    second_ctx = [
        contexts[0] + list(first[0].token_ids) + tool,
        contexts[2] + list(first[1].token_ids) + tool[:3],
    ]
    second = policy.generate(
        [GenerationRequest(second_ctx[0], 6, 0, "a"), GenerationRequest(second_ctx[1], 4, 1, "b")],
        GREEDY,
    )
    refs = _reference(model, chat, tokenizer).generate(
        [GenerationRequest(c, n) for c, n in zip(second_ctx, (6, 4))], GREEDY
    )
    _assert_same(second, refs)


def test_mixed_batch_of_cached_and_new_rows(model, chat, tokenizer, contexts):
    policy = _policy(model, chat, tokenizer)
    (g,) = policy.generate([GenerationRequest(contexts[2], 4, 0, "a")], GREEDY)
    ctx_a = contexts[2] + list(g.token_ids) + chat.encode("\nmore")
    requests = [
        GenerationRequest(ctx_a, 5, 0, "a"),
        GenerationRequest(contexts[0], 7, 1, "new"),
        GenerationRequest(contexts[1], 2, 2, None),
    ]
    _assert_same(
        policy.generate(requests, GREEDY),
        _reference(model, chat, tokenizer).generate(requests, GREEDY),
    )


def test_stale_cache_is_never_used(model, chat, tokenizer, contexts):
    """A context that does not extend the ids cached under its key is encoded from scratch."""
    policy = _policy(model, chat, tokenizer)
    policy.generate([GenerationRequest(contexts[2], 4, 0, "a")], GREEDY)
    other = [GenerationRequest(contexts[0], 5, 0, "a")]  # same key, unrelated context
    _assert_same(
        policy.generate(other, GREEDY), _reference(model, chat, tokenizer).generate(other, GREEDY)
    )


def test_unrequested_keys_are_evicted(model, chat, tokenizer, contexts):
    policy = _policy(model, chat, tokenizer)
    policy.generate(
        [GenerationRequest(contexts[0], 2, 0, "a"), GenerationRequest(contexts[1], 2, 1, "b")],
        GREEDY,
    )
    assert set(policy._cache) == {"a", "b"}
    policy.generate([GenerationRequest(contexts[2], 2, 0, "c")], GREEDY)
    assert set(policy._cache) == {"c"}
    policy.clear_cache()
    assert policy._cache == {}


def test_shared_prefix_equals_separate_encoding(model, chat, tokenizer):
    """Rows starting with the same long prompt share its KV; results equal one-by-one generation."""
    prefix = chat.encode(
        "<|im_start|>system\nYou are a helpful assistant. Use the calculator tool for arithmetic."
        " When you know the result, reply with <answer>NUMBER</answer>.<|im_end|>\n"
    )
    assert len(prefix) >= 16
    tails = [
        "<|im_start|>user\nWhat is 3 * 4?",
        "<|im_start|>user\nMultiply 347 by 28 please.",
        "<|im_start|>user\nHi",
    ]
    requests = [
        GenerationRequest(prefix + chat.encode(t), n, i)
        for i, (t, n) in enumerate(zip(tails, (4, 6, 2)))
    ]
    batched = _policy(model, chat, tokenizer).generate(requests, GREEDY)
    reference = _reference(model, chat, tokenizer)
    _assert_same(batched, [reference.generate([r], GREEDY)[0] for r in requests])


def test_multi_turn_rollouts_score_to_their_recorded_logprobs(tiny_model_dir, chat, tokenizer):
    """Through the engine, 3 turns per episode (an env that always answers with a tool message), KV
    caches reused across turns: the trainer's scores of the stored streams equal the recorded
    logprobs, and greedy decoding gives the same streams as a policy without any KV reuse."""
    from agentic_rl.envs import CalculatorEnv
    from agentic_rl.rollout import RolloutConfig, run_episodes
    from agentic_rl.types import Message, Observation

    class KeepGoing(CalculatorEnv):
        def step(self, action):
            return Observation((Message("tool", "keep going"),)), 0.0, False, False, {}

    from tests.tiny_eos import bias_toward_eos

    model = bias_toward_eos(
        load_model(tiny_model_dir), chat.eos_token_id
    )  # replies end, so episodes go on
    config = RolloutConfig(max_turns=3, max_new_tokens=8)

    def rollout(policy, greedy):
        envs = [KeepGoing() for _ in range(3)]
        return run_episodes(policy, chat, envs, [0, 1, 2], ["g"] * 3, config, greedy=greedy)

    sampled = rollout(
        _policy(model, chat, tokenizer, generator=torch.Generator().manual_seed(3)), greedy=False
    )
    assert all(len(t.turns) == 3 and t.stop_reason == StopReason.MAX_TURNS for t in sampled)
    batch = pack(sampled)
    with torch.no_grad():
        scored, _ = score(model, batch)
    torch.testing.assert_close(scored, batch.old_logprobs, atol=1e-4, rtol=0)

    cached = rollout(_policy(model, chat, tokenizer), greedy=True)
    fresh = rollout(_reference(model, chat, tokenizer), greedy=True)
    assert [t.token_ids for t in cached] == [t.token_ids for t in fresh]
    for a, b in zip(cached, fresh):
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )
