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
