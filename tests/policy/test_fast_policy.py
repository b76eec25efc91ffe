"""FastPolicy (fused weights, slot KV cache, continuous batching) against the simple HFPolicy path.

The fast path must produce the same trajectories as the simple one for the same seeds: same
token ids, logprobs equal to float tolerance. Checked on a tiny random Llama for single calls
(mixed prompt lengths, shared prefixes, identical prompts, a queue longer than the batch),
across turns (KV reuse), after a weight change (fused copies refreshed), with LoRA, and through
the rollout engine (continuous schedule vs turn-synchronous schedule).
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.envs import make
from agentic_rl.policy.base import GenerationRequest, SamplingParams
from agentic_rl.policy.fast import FastPolicy, make_policy
from agentic_rl.policy.hf import HFPolicy
from agentic_rl.policy.llama_decoder import SlotLlamaDecoder, UnsupportedModel
from agentic_rl.policy.model_loading import load_model
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.types import StopReason

# a low temperature makes the tiny random model's distributions peaked, so turns end at different lengths
SAMPLE = SamplingParams(temperature=0.05)
TOL = 1e-4  # float32 logprob agreement (fused matmuls sum in another order)
ENV = (
    "frozenlake-v0"  # multi-turn whatever the policy says: an invalid move is an error observation
)


@pytest.fixture()
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


def _eos_often(model, contexts) -> int:
    """An id the tiny random model samples from these contexts at T=0.05 after the first token
    (it repeats tokens), used as the end-of-turn id so some rows stop early (its real EOS has
    probability ~1/49,152)."""
    policy = HFPolicy(model, -1, 0)
    reqs = [GenerationRequest(tuple(c), 16, sample_seed=s) for s, c in enumerate(contexts)]
    counts: dict[int, int] = {}
    for g in policy.generate(reqs, SAMPLE):
        for t in set(g.token_ids[1:]):
            counts[t] = counts.get(t, 0) + 1
    return max(counts, key=counts.get)


def _contexts(chat, n: int) -> list[list[int]]:
    system = "<|im_start|>system\nYou are a helpful assistant with a calculator tool.<|im_end|>\n"
    return [
        chat.encode(
            system
            + f"<|im_start|>user\nWhat is {i % 3} * {7 + (i % 3) * 11}{'?' * (i % 2)}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
        for i in range(n)
    ]


def _assert_same(simple, fast):
    assert len(simple) == len(fast)
    for a, b in zip(simple, fast):
        assert a.token_ids == b.token_ids
        assert a.finished == b.finished
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < TOL


@pytest.mark.parametrize("max_batch", [64, 3])
def test_one_call_matches_hf_policy(model, chat, max_batch):
    ctxs = _contexts(chat, 7)
    eos = _eos_often(
        model, ctxs
    )  # identical prompts (i and i + 6), a shared system prefix, 2 lengths
    reqs = [
        GenerationRequest(
            tuple(c), 4 + 2 * i, episode_index=i, cache_key=f"e{i}", sample_seed=10 + i
        )
        for i, c in enumerate(ctxs)
    ]
    simple = HFPolicy(model, eos, 0).generate(reqs, SAMPLE)
    fast = FastPolicy(model, eos, 0, max_batch=max_batch).generate(reqs, SAMPLE)
    _assert_same(simple, fast)
    assert (
        len({len(g.token_ids) for g in fast}) > 1
    )  # rows really left the batch at different steps


def test_greedy_matches_and_rows_without_key_or_seed(model, chat):
    ctxs = _contexts(chat, 3)
    reqs = [GenerationRequest(tuple(c), 6) for c in ctxs]  # no cache key, no seed
    greedy = SamplingParams(greedy=True)
    _assert_same(
        HFPolicy(model, -1, 0).generate(reqs, greedy),
        FastPolicy(model, -1, 0).generate(reqs, greedy),
    )


def test_second_turn_reuses_kv_and_matches(model, chat):
    ctxs = _contexts(chat, 4)
    eos = _eos_often(model, ctxs)
    fast = FastPolicy(model, eos, 0)
    reqs = [
        GenerationRequest(tuple(c), 12, episode_index=i, cache_key=f"e{i}", sample_seed=i)
        for i, c in enumerate(ctxs)
    ]
    first = fast.generate(reqs, SAMPLE)
    tail = chat.encode("<|im_start|>user\nresult: 42<|im_end|>\n<|im_start|>assistant\n")
    reqs2 = [
        GenerationRequest(
            tuple(c) + g.token_ids + tuple(tail),
            12,
            episode_index=i,
            cache_key=f"e{i}",
            sample_seed=100 + i,
        )
        for i, (c, g) in enumerate(zip(ctxs, first))
    ]
    encoded: list[int] = []
    original = fast.decoder.forward

    def spy(first_slot, ids, past):
        encoded.append(sum(len(x) for x in ids))
        return original(first_slot, ids, past)

    fast.decoder.forward = spy
    second = fast.generate(reqs2, SAMPLE)
    _assert_same(HFPolicy(model, eos, 0).generate(reqs2, SAMPLE), second)
    # the admission forward encoded only each row's new tokens, not the whole history
    new_tokens = sum(
        len(r.context_ids) - len(c) - len(g.token_ids) + 1 for r, c, g in zip(reqs2, ctxs, first)
    )
    assert encoded[0] == new_tokens


def test_context_that_does_not_extend_the_cache_is_reencoded(model, chat):
    ctxs = _contexts(chat, 2)
    fast = FastPolicy(model, -1, 0)
    fast.generate([GenerationRequest(tuple(ctxs[0]), 4, cache_key="e")], SAMPLE)
    other = GenerationRequest(tuple(ctxs[1]) + (5, 6, 7), 5, cache_key="e", sample_seed=3)
    _assert_same(HFPolicy(model, -1, 0).generate([other], SAMPLE), fast.generate([other], SAMPLE))


def test_weight_change_is_picked_up(model, chat):
    ctxs = _contexts(chat, 2)
    reqs = [GenerationRequest(tuple(c), 5, sample_seed=i) for i, c in enumerate(ctxs)]
    fast = FastPolicy(model, -1, 0)
    before = fast.generate(reqs, SAMPLE)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # an in-place update, like optimizer.step()
    after = fast.generate(reqs, SAMPLE)
    _assert_same(HFPolicy(model, -1, 0).generate(reqs, SAMPLE), after)
    assert [g.logprobs for g in before] != [g.logprobs for g in after]


def test_weight_change_between_steps_of_an_open_stream_is_picked_up(model, chat):
    """The parameter list is read when a stream opens; each step still checks their versions."""
    ctx = _contexts(chat, 1)[0]
    fast = FastPolicy(model, -1, 0)
    with fast.open_stream(SAMPLE) as stream:
        stream.submit(GenerationRequest(tuple(ctx), 4, cache_key="e", sample_seed=1))
        stream.step()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        stream.step()
        assert (
            fast.decoder._version == fast.decoder._param_version()
        )  # rebuilt from the new weights


def test_adapter_attached_after_the_policy_was_built_is_used(model, chat):
    from peft import LoraConfig, get_peft_model

    fast = FastPolicy(model, -1, 0)
    reqs = [GenerationRequest(tuple(c), 6, sample_seed=i) for i, c in enumerate(_contexts(chat, 2))]
    fast.generate(reqs, SAMPLE)  # weights copied before the adapter exists
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    _assert_same(HFPolicy(peft_model, -1, 0).generate(reqs, SAMPLE), fast.generate(reqs, SAMPLE))


def test_lora_adapters_are_merged_for_sampling(model, chat):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # non-zero deltas (peft initialises B to zero)
    reqs = [GenerationRequest(tuple(c), 6, sample_seed=i) for i, c in enumerate(_contexts(chat, 3))]
    _assert_same(
        HFPolicy(peft_model, -1, 0).generate(reqs, SAMPLE),
        FastPolicy(peft_model, -1, 0).generate(reqs, SAMPLE),
    )


def test_stream_rejects_bad_requests_and_duplicate_keys(model, chat):
    fast = FastPolicy(model, -1, 0)
    with fast.open_stream(SAMPLE) as stream:
        with pytest.raises(ValueError, match="non-empty context"):
            stream.submit(GenerationRequest((), 4))
        with pytest.raises(ValueError, match="max_new_tokens"):
            stream.submit(GenerationRequest((1, 2), 0))
        stream.submit(GenerationRequest((1, 2, 3), 2, cache_key="a"))
        with pytest.raises(ValueError, match="already in the stream"):
            stream.submit(GenerationRequest((1, 2, 3), 2, cache_key="a"))
    with pytest.raises(ValueError):
        FastPolicy(model, -1, 0, max_batch=0)


def test_unsupported_architecture_falls_back(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM, GPT2Config

    cfg = GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2, n_positions=64)
    gpt2 = AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(UnsupportedModel, match="Llama"):
        SlotLlamaDecoder(gpt2)
    assert isinstance(make_policy(gpt2, 2, 2), HFPolicy)


def test_rollout_continuous_schedule_matches_turn_synchronous(model, chat):
    """Same seeds, same sample_seed: the engine's continuous schedule (FastPolicy, env steps on
    worker threads, rows joining mid-batch) records the same token streams as the simple
    turn-by-turn schedule with HFPolicy."""
    eos = chat.eos_token_id
    cfg = RolloutConfig(
        max_turns=3, max_new_tokens=10, max_total_tokens=1024, temperature=SAMPLE.temperature
    )
    seeds = [0, 0, 1, 1, 2, 2]
    # stop at different lengths: the tiny model's frequent token ends a turn too
    probe = [make(ENV) for _ in range(3)]
    often = _eos_often(
        model,
        [
            chat.encode(chat.render_prompt(e.reset(seed=s)[0].messages))
            for e, s in zip(probe, (0, 1, 2))
        ],
    )
    for env in probe:
        env.close()
    from tests.tiny_eos import bias_toward_eos

    # a reply cut at max_new_tokens ends its episode: a small bias toward `often` (x20 at T = 0.05)
    # makes turns end after 1-6 tokens, so episodes of 3 turns and one cut episode both occur
    bias_toward_eos(model, often, logit=0.6)

    simple = HFPolicy(model, often, 0)
    fast = FastPolicy(model, often, 0, max_batch=4)
    runs = []
    for policy in (simple, fast):
        envs = [make(ENV) for _ in seeds]
        runs.append(
            run_episodes(policy, chat, envs, seeds, [str(s) for s in seeds], cfg, sample_seed=1234)
        )
        for env in envs:
            env.close()
    assert eos != often
    for a, b in zip(*runs):
        assert a.token_ids == b.token_ids
        assert a.loss_mask == b.loss_mask
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < TOL
        assert [t.token_ids for t in a.turns] == [t.token_ids for t in b.turns]
        assert a.stop_reason == b.stop_reason
    assert any(len(t.turns) > 1 for t in runs[1])  # multi-turn episodes really ran
    assert any(
        t.stop_reason is StopReason.MAX_NEW_TOKENS for t in runs[1]
    )  # and a cut one, in both schedules


def test_kv_slots_grow_to_what_the_episodes_need(model, chat):
    """A queue longer than the batch still gets exactly one KV slot per episode (memory)."""
    ctxs = _contexts(chat, 5)
    fast = FastPolicy(model, -1, 0, max_batch=2)
    fast.clear_cache()  # start from a one-slot cache
    reqs = [
        GenerationRequest(tuple(c), 3 + i, cache_key=f"e{i}", sample_seed=i)
        for i, c in enumerate(ctxs)
    ]
    fast.generate(reqs, SAMPLE)
    assert fast.decoder.num_slots == 5
    fast.clear_cache()
    assert fast.decoder.num_slots == 1


def test_packed_forward_mixes_decoding_and_joining_rows(model):
    """One forward over rows of 1 token (decoding) and of several (joining), in two runs of each
    kind, gives each row the logits of a plain HF forward over its whole sequence, and writes
    the same KV as encoding the rows one by one."""
    g = torch.Generator().manual_seed(0)
    full = [torch.randint(0, 1000, (n,), generator=g).tolist() for n in (9, 12, 20, 6, 11, 15)]
    # cached prefix of each row, then its new tokens in the mixed call: 1, 1, 8, 1, 5 (fresh), 3
    cut = [8, 11, 12, 5, 0, 12]
    mixed = SlotLlamaDecoder(model, slots=6, capacity=32)
    single = SlotLlamaDecoder(model, slots=6, capacity=32)
    for dec in (mixed, single):
        dec.sync()
        for s, (seq, c) in enumerate(zip(full, cut)):
            if c:
                dec.forward(s, [seq[:c]], [0])
    out = mixed.forward(0, [seq[c:] for seq, c in zip(full, cut)], cut)
    assert out.shape == (6, model.config.vocab_size)
    for s, (seq, c) in enumerate(zip(full, cut)):
        alone = single.forward(s, [seq[c:]], [c])[0]
        with torch.no_grad():
            ref = model(torch.tensor([seq])).logits[0, -1].float()
        assert torch.allclose(out[s], ref, atol=1e-4), s
        assert torch.allclose(out[s], alone, atol=1e-5), s
    for a, b in zip(mixed.keys + mixed.values, single.keys + single.values):
        assert torch.allclose(a, b, atol=1e-5)


def test_joining_rows_share_the_decoding_rows_forward(model, chat):
    """A row that joins while others decode is encoded in the same forward (one per step)."""
    ctxs = _contexts(chat, 3)
    fast = FastPolicy(model, -1, 0)
    calls: list[list[int]] = []
    original = fast.decoder.forward

    def spy(first_slot, ids, past):
        calls.append([len(x) for x in ids])
        return original(first_slot, ids, past)

    fast.decoder.forward = spy
    with fast.open_stream(SAMPLE) as stream:
        stream.submit(GenerationRequest(tuple(ctxs[0]), 6, cache_key="a", sample_seed=1))
        stream.step()
        stream.step()
        stream.submit(GenerationRequest(tuple(ctxs[1]), 4, cache_key="b", sample_seed=2))
        stream.step()
        while stream.busy:
            stream.step()
    assert calls[2] == [1, len(ctxs[1])]  # a's decode token and b's whole prompt, one forward
    assert all(len(c) == 2 for c in calls[3:5]) and len(calls) == 6


def test_bf16_sampler_follows_the_float32_model(model, chat):
    """A bfloat16 sampling copy (weights, matmuls, KV in bf16) gives logprobs close to, not equal
    to, the float32 model's for the tokens it samples; the trained model stays float32."""
    ctxs = _contexts(chat, 4)
    reqs = [
        GenerationRequest(tuple(c), 8, cache_key=f"e{i}", sample_seed=i) for i, c in enumerate(ctxs)
    ]
    fast = FastPolicy(model, -1, 0, dtype=torch.bfloat16)
    assert fast.decoder.keys[0].dtype == torch.bfloat16
    gens = fast.generate(reqs, SamplingParams(temperature=1.0))
    diffs = []
    for r, g in zip(reqs, gens):
        ids = torch.tensor([list(r.context_ids) + list(g.token_ids)])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].float(), -1)
        n = len(r.context_ids)
        diffs += [
            abs(logp[n - 1 + k, t].item() - lp)
            for k, (t, lp) in enumerate(zip(g.token_ids, g.logprobs))
        ]
    assert 1e-6 < max(diffs) < 0.1
    assert next(model.parameters()).dtype == torch.float32
    with pytest.raises(UnsupportedModel, match="fast sampler"):
        make_policy(model, -1, 0, fast=False, dtype=torch.bfloat16)
