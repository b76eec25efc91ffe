"""The static-shape decode step (what a CUDA graph replays) against the ragged forward.

On the CPU the static step runs eagerly (``static_decode="eager"``): it must give the ragged
forward's tokens and logprobs (float tolerance), keep padding rows out of every episode's KV
(they write the scratch slot), follow weight changes made in place (the GPU path), and grow the
cache when a bucket needs more slots. The CUDA graph tests run only where CUDA is.
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.policy.base import GenerationRequest, SamplingParams
from agentic_rl.policy.decode_graphs import row_bucket
from agentic_rl.policy.fast import FastPolicy
from agentic_rl.policy.llama_decoder import SlotLlamaDecoder
from agentic_rl.policy.model_loading import load_model

SAMPLE = SamplingParams(temperature=0.7)
TOL = 1e-4
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture()
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


def _requests(chat, n: int, new: int = 12, prefix: str = "e") -> list[GenerationRequest]:
    ctxs = [
        chat.encode(f"<|im_start|>user\nWhat is {i} * {i + 7}?{'!' * (i % 3)}<|im_end|>\n")
        for i in range(n)
    ]
    return [
        GenerationRequest(tuple(c), new + i, cache_key=f"{prefix}{i}", sample_seed=100 + i)
        for i, c in enumerate(ctxs)
    ]


def _assert_same(a, b, tol=TOL):
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids
        assert max(abs(u - v) for u, v in zip(x.logprobs, y.logprobs)) < tol


def test_row_buckets():
    assert [row_bucket(n) for n in (1, 2, 3, 5, 8, 9, 17, 64, 65, 100)] == [
        1,
        2,
        4,
        8,
        8,
        16,
        24,
        64,
        96,
        128,
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_decode_matches_the_ragged_forward_over_turns(model, chat, dtype):
    ragged = FastPolicy(model, -1, 0, dtype=dtype)
    static = FastPolicy(model, -1, 0, dtype=dtype, static_decode="eager")
    first = _requests(chat, 7)  # 7 rows: buckets 8, then fewer as rows finish
    a, b = ragged.generate(first, SAMPLE), static.generate(first, SAMPLE)
    # bf16 sums in another order on the two paths: its logprobs agree to bf16 precision
    _assert_same(a, b, TOL if dtype == torch.float32 else 0.05)
    # second turn on the cached KV (the joining rows encode only their new tokens)
    second = [
        GenerationRequest(
            tuple(r.context_ids) + g.token_ids + (5, 6), 9, cache_key=r.cache_key, sample_seed=7
        )
        for r, g in zip(first, a)
    ]
    _assert_same(
        ragged.generate(second, SAMPLE),
        static.generate(second, SAMPLE),
        TOL if dtype == torch.float32 else 0.05,
    )


def test_padding_rows_write_only_the_scratch_slot(model, chat):
    dec = SlotLlamaDecoder(model, slots=6, capacity=64, static_decode="eager")
    dec.sync()
    assert dec.scratch_slot == dec.num_slots == 6
    # slots 0-2 decode; slot 3 holds a paused episode's KV (3 rows pad to a bucket of 4)
    dec.forward(0, [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], [0, 0, 0, 0])
    paused = [k[3].clone() for k in dec.keys], [v[3].clone() for v in dec.values]
    logits = dec.forward(0, [[11], [12], [13]], [3, 2, 1])
    assert logits.shape == (3, model.config.vocab_size)
    assert all(torch.equal(k[3], p) for k, p in zip(dec.keys, paused[0]))
    assert all(torch.equal(v[3], p) for v, p in zip(dec.values, paused[1]))
    # the same step on the ragged path gives the same logits
    ref = SlotLlamaDecoder(model, slots=6, capacity=64)
    ref.sync()
    ref.forward(0, [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], [0, 0, 0, 0])
    assert torch.allclose(ref.forward(0, [[11], [12], [13]], [3, 2, 1]), logits, atol=1e-4)


def test_a_bucket_larger_than_the_cache_grows_it(model):
    dec = SlotLlamaDecoder(model, slots=2, capacity=16, static_decode="eager")
    dec.sync()
    dec.forward(0, [[1, 2], [3]], [0, 0])
    logits = dec.forward(0, [[4], [5]], [2, 1])  # bucket 2: fits
    assert dec.num_slots == 2
    dec.reserve(3, 16)
    dec.forward(2, [[9]], [0])
    dec.forward(0, [[6], [7], [8]], [3, 2, 1])  # bucket 4 > 3 slots: the cache grows, KV kept
    assert dec.num_slots >= 4 and logits.shape[0] == 2


def test_in_place_weight_refresh_is_followed(model, chat):
    """Unpacked weight copies (the GPU layout) are refreshed in place after an optimizer step:
    the static step then samples from the new weights, like a fresh sampler."""
    static = FastPolicy(model, -1, 0, static_decode="eager")
    static.decoder._pack = False  # the GPU layout: plain tensors, reloaded in place
    reqs = _requests(chat, 3)
    static.generate(reqs, SAMPLE)
    buffers = [lin.weight.data_ptr() for lin in static.decoder._linears[0]]
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    changed = static.generate(_requests(chat, 3, prefix="f"), SAMPLE)
    assert [lin.weight.data_ptr() for lin in static.decoder._linears[0]] == buffers
    fresh = FastPolicy(model, -1, 0).generate(_requests(chat, 3, prefix="f"), SAMPLE)
    _assert_same(changed, fresh)


def test_decoder_rejects_an_unknown_static_mode_and_graphs_off_cuda(model):
    with pytest.raises(ValueError, match="static_decode"):
        SlotLlamaDecoder(model, static_decode="yes")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            SlotLlamaDecoder(model, static_decode="graphs")


@needs_cuda
def test_cuda_graphs_match_the_eager_static_step(model, chat):
    cuda_model = model.to("cuda")
    eager = FastPolicy(cuda_model, -1, 0, dtype=torch.bfloat16, static_decode="eager")
    graphs = FastPolicy(cuda_model, -1, 0, dtype=torch.bfloat16, static_decode="graphs")
    reqs = _requests(chat, 7)
    _assert_same(eager.generate(reqs, SAMPLE), graphs.generate(reqs, SAMPLE), 1e-3)
    assert graphs.decoder.static.captures >= 1
    with torch.no_grad():  # a weight change keeps the graphs (in-place refresh) and is followed
        for p in cuda_model.parameters():
            p.mul_(1.2)
    captured = graphs.decoder.static.captures
    reqs = _requests(chat, 7, prefix="g")
    _assert_same(eager.generate(reqs, SAMPLE), graphs.generate(reqs, SAMPLE), 1e-3)
    assert graphs.decoder.static.captures == captured
