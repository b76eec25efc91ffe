"""sample_tokens: the exponential race samples softmax(logits / T) exactly, logprobs are the
sampling distribution's, and a seeded row does not depend on the other rows of its batch."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.policy.base import SamplingParams
from agentic_rl.policy.sampling import RowSampler, sample_tokens


def test_frequencies_match_the_softmax_at_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    sampling = SamplingParams(temperature=2.0)
    # p = softmax([1, .5, 0, -.5]) = [0.4519, 0.2741, 0.1662, 0.1008] (hand: e^1=2.718, e^.5=1.649,
    # e^0=1, e^-.5=0.607; sum 5.974)
    expected = [2.718 / 5.974, 1.649 / 5.974, 1.0 / 5.974, 0.607 / 5.974]
    counts = [0, 0, 0, 0]
    n = 20000
    rows = [RowSampler(s) for s in range(n)]
    tokens, lps = sample_tokens(logits.expand(n, 4), sampling, rows)
    for t in tokens:
        counts[t] += 1
    for c, p in zip(counts, expected):
        assert abs(c / n - p) < 4 * math.sqrt(p * (1 - p) / n)  # within 4 standard errors
    for t, lp in zip(tokens[:50], lps[:50]):
        assert lp == pytest.approx(math.log(expected[t]), abs=1e-3)


def test_seeded_rows_do_not_depend_on_their_batch():
    torch.manual_seed(0)
    logits = torch.randn(5, 100)
    sampling = SamplingParams(temperature=1.0)
    alone = [
        sample_tokens(logits[i : i + 1], sampling, [RowSampler(40 + i)])[0][0] for i in range(5)
    ]
    together, _ = sample_tokens(logits, sampling, [RowSampler(40 + i) for i in range(5)])
    reversed_, _ = sample_tokens(logits.flip(0), sampling, [RowSampler(44 - i) for i in range(5)])
    assert together == alone == reversed_[::-1]


def test_greedy_takes_the_argmax_and_unseeded_rows_follow_the_generator():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 0.0]])
    tokens, lps = sample_tokens(logits, SamplingParams(greedy=True), [RowSampler(None)] * 2)
    assert tokens == [1, 0]
    assert lps[0] == pytest.approx(float(torch.log_softmax(logits[0], -1)[1]))
    a = sample_tokens(
        torch.zeros(3, 50),
        SamplingParams(),
        [RowSampler(None)] * 3,
        torch.Generator().manual_seed(1),
    )
    b = sample_tokens(
        torch.zeros(3, 50),
        SamplingParams(),
        [RowSampler(None)] * 3,
        torch.Generator().manual_seed(1),
    )
    assert a == b
    with pytest.raises(ValueError, match="row samplers"):
        sample_tokens(logits, SamplingParams(), [RowSampler(1)])


# ---- the counter-based noise of accelerators (run here on the CPU with counter_noise=True) ----


def test_splitmix64_matches_its_published_first_outputs():
    # SplitMix64 seeded with 1234567: the generator's state advances by gamma before each output;
    # first outputs from the reference C implementation (Vigna, prng.di.unimi.it/splitmix64.c)
    from agentic_rl.policy.sampling import _GAMMA, splitmix64

    state = 1234567
    out = []
    for _ in range(3):
        state = (state + _GAMMA) % 2**64
        out.append(splitmix64(state))
    assert out == [6457827717110365317, 3203168211198807973, 9817491932198370423]


def test_the_tensor_hash_equals_the_python_reference_bit_for_bit():
    from agentic_rl.policy.sampling import _mix_tensor, _signed, splitmix64

    values = [0, 1, 2**63 - 1, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15, 123456789123456789]
    got = _mix_tensor(torch.tensor([_signed(v) for v in values], dtype=torch.int64)).tolist()
    assert [g % 2**64 for g in got] == [splitmix64(v) for v in values]


def test_counter_uniform_is_uniform_and_a_function_of_key_and_token():
    from agentic_rl.policy.sampling import counter_uniform

    u = counter_uniform([7, 8, 2**64 - 1], 4096, "cpu")
    assert u.shape == (3, 4096) and float(u.min()) > 0 and float(u.max()) < 1
    assert torch.equal(u[0], counter_uniform([7], 4096, "cpu")[0])  # row 0 alone: the same draws
    assert not torch.equal(u[0], u[1])
    # 64 equal bins of 12,288 draws: chi-square with 63 degrees of freedom, 99.9 % quantile 103.4
    counts = torch.histc(u.flatten(), bins=64, min=0.0, max=1.0)
    expected = u.numel() / 64
    assert float(((counts - expected) ** 2 / expected).sum()) < 103.4
    # neighbouring tokens and neighbouring keys are uncorrelated (|r| < 4 / sqrt(n))
    corr = torch.corrcoef(torch.stack([u[0, :-1], u[0, 1:], u[1, :-1]]))
    assert float(corr[0, 1].abs()) < 4 / 4096**0.5 and float(corr[0, 2].abs()) < 4 / 4096**0.5


def test_counter_noise_samples_the_softmax_and_is_schedule_independent():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    sampling = SamplingParams(temperature=2.0)
    expected = [2.718 / 5.974, 1.649 / 5.974, 1.0 / 5.974, 0.607 / 5.974]  # as above
    n = 20000
    rows = [RowSampler(s) for s in range(n)]
    tokens, _ = sample_tokens(logits.expand(n, 4), sampling, rows, counter_noise=True)
    for tok, p in enumerate(expected):
        freq = tokens.count(tok) / n
        assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / n)
    # a row's k-th draw depends on its seed and k only: alone, in a batch, or reversed
    torch.manual_seed(0)
    logits = torch.randn(5, 100)

    def draws(order):
        samplers = {i: RowSampler(40 + i) for i in order}
        out = {i: [] for i in order}
        for _ in range(3):  # three successive tokens of each row
            toks, _ = sample_tokens(
                logits[list(order)], sampling, [samplers[i] for i in order], counter_noise=True
            )
            for i, t in zip(order, toks):
                out[i].append(t)
        return out

    together = draws(range(5))
    assert draws(range(4, -1, -1)) == together
    assert all(draws([i])[i] == together[i] for i in range(5))
    assert len({tuple(v) for v in together.values()}) > 1  # the rows do differ


def test_counter_noise_runs_where_the_logits_are():
    """On a (fake) CUDA device every tensor of the counter path stays on that device: a CPU
    tensor mixed in raises (FakeTensorMode checks devices without a GPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from agentic_rl.policy import sampling as sampling_module

    try:
        with FakeTensorMode():
            rows = torch.empty(2, dtype=torch.int64, device="cuda")
            u = sampling_module.uniform_from_states(rows, 49152)
            z = torch.empty(2, 49152, device="cuda")
            race = (z - (-u.log()).log()).argmax(dim=-1)
            assert u.device.type == "cuda" and race.device.type == "cuda"
            with pytest.raises(RuntimeError, match="device"):  # the check does catch a CPU tensor
                sampling_module.uniform_from_states(rows, 49152) + torch.zeros(2, 49152)
    finally:  # the per-device cache must not keep fake tensors
        sampling_module._VOCAB_OFFSETS.clear()


def test_vocab_offsets_wrap_like_unsigned_arithmetic():
    from agentic_rl.policy.sampling import _GAMMA, _vocab_offsets

    offsets = _vocab_offsets(70000, torch.device("cpu")).tolist()
    for v in (0, 1, 2, 12345, 69999):
        assert offsets[v] % 2**64 == v * _GAMMA % 2**64


@pytest.mark.parametrize("counter", [False, True], ids=["numpy-noise", "counter-noise"])
def test_a_token_of_negligible_probability_is_never_drawn(counter):
    """Over Gemma 3's 262,144-token vocabulary with one token at logit 0 and every other at −60
    (each e^-60 ≈ 1e-26 likely), 1,200 seeded draws all pick the likely token. The old noise
    (float32 exponentials that are exactly 0 once per ~2**23 entries; counter uniforms that
    rounded to 1.0 once per 2**24) let a uniformly random token win ~3 % (numpy) and ~1.6 %
    (counter) of these draws: about 36 and 19 expected here, so this fails on it."""
    vocab = 262_144
    logits = torch.full((100, vocab), -60.0)
    logits[:, 7] = 0.0
    drawn = []
    for chunk in range(12):
        rows = [RowSampler(1000 * chunk + r) for r in range(100)]
        tokens, lps = sample_tokens(logits, SamplingParams(), rows, counter_noise=counter)
        drawn += tokens
        assert all(abs(lp) < 1e-6 for t, lp in zip(tokens, lps) if t == 7)  # log(1 - ~1e-21)
    assert set(drawn) == {7}, f"{sum(t != 7 for t in drawn)} of {len(drawn)} draws were not token 7"
