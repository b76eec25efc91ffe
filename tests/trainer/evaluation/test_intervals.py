"""Tests for trainer.stats: Wilson intervals by hand, paired bootstrap on constructed examples."""

from __future__ import annotations

import pytest

from agentic_rl.trainer.evaluation.intervals import (
    Interval,
    paired_bootstrap,
    pooled_paired_bootstrap,
    wilson_interval,
)


def test_wilson_by_hand():
    # z = 1.959964, z² = 3.841459.
    # 50/100: p = 0.5, 1 + z²/n = 1.038415, centre = (0.5 + 0.019207)/1.038415 = 0.5,
    # half = 1.959964/1.038415 · sqrt(0.0025 + 0.000096) = 1.887456 · 0.050951 = 0.096169 -> [0.404, 0.596]
    w = wilson_interval(50, 100)
    assert w.estimate == 0.5
    assert w.low == pytest.approx(0.40383, abs=1e-4) and w.high == pytest.approx(0.59617, abs=1e-4)
    # 0/10: 1 + z²/n = 1.384146, centre = (0 + 0.192073)/1.384146 = 0.138767,
    # half = 1.959964/1.384146 · sqrt(0 + 3.841459/400) = 1.416009 · 0.097998 = 0.138767 -> [0, 0.2775]
    w = wilson_interval(0, 10)
    assert w.low == pytest.approx(0.0, abs=1e-12) and w.high == pytest.approx(0.27753, abs=1e-4)
    # 10/10 mirrors 0/10: [0.7225, 1]
    w = wilson_interval(10, 10)
    assert w.low == pytest.approx(0.72247, abs=1e-4) and w.high == pytest.approx(1.0, abs=1e-12)
    # 54/100 (the RL result): p = 0.54, centre = (0.54 + 0.019207)/1.038415 = 0.538515,
    # half = 1.887456 · sqrt(0.002484 + 0.000096) = 1.887456 · 0.050795 = 0.095874 -> [0.4426, 0.6344]
    w = wilson_interval(54, 100)
    assert w.low == pytest.approx(0.4426, abs=2e-4) and w.high == pytest.approx(0.6344, abs=2e-4)


def test_wilson_narrows_with_n_and_other_confidence():
    assert wilson_interval(500, 1000).high - wilson_interval(500, 1000).low < 0.07
    # 90 %: z = 1.644854; 50/100 -> half ≈ 1.644854/1.027055 · sqrt(0.0025 + 0.0000676) = 0.08114
    w = wilson_interval(50, 100, confidence=0.90)
    assert w.high - 0.5 == pytest.approx(0.08114, abs=1e-4)


@pytest.mark.parametrize("k, n", [(0, 0), (-1, 10), (11, 10)])
def test_wilson_rejects_bad_counts(k, n):
    with pytest.raises(ValueError):
        wilson_interval(k, n)


def test_wilson_rejects_bad_confidence():
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)


def test_paired_bootstrap_two_tasks_exact():
    # d = [0, 1]: a resample's mean is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4, so the 2.5th
    # percentile is 0 and the 97.5th is 1 (B large enough that both extremes appear).
    got = paired_bootstrap([0, 0], [0, 1], resamples=4000, seed=1)
    assert got == Interval(0.5, 0.0, 1.0)


def test_paired_bootstrap_binomial_case():
    # d = 10 ones among 100 tasks (10 tasks fixed by training, none broken). A resample's mean is
    # Binomial(100, 0.1)/100: mean 0.1, sd sqrt(0.1·0.9/100) = 0.03, so the 95 % interval is about
    # 0.1 ± 1.96·0.03 = [0.04, 0.16]; the exact binomial quantiles are 0.05 and 0.16.
    before = [i % 2 for i in range(100)]
    after = [1 if i < 20 else b for i, b in enumerate(before)]  # even i < 20: 0 -> 1 (10 tasks)
    got = paired_bootstrap(before, after, seed=0)
    assert got.estimate == pytest.approx(0.1)
    assert 0.035 <= got.low <= 0.055 and 0.155 <= got.high <= 0.17
    # pairing matters: the two rates 0.5 and 0.6 have overlapping Wilson intervals
    assert wilson_interval(60, 100).low < wilson_interval(50, 100).high
    # seeded: the same call gives the same interval, another seed almost the same
    assert paired_bootstrap(before, after, seed=0) == got
    assert paired_bootstrap(before, after, seed=7).low == pytest.approx(got.low, abs=0.011)


def test_paired_bootstrap_all_equal_is_degenerate():
    # every task changes the same way (here: every task fixed), so every resample's mean is 1
    assert paired_bootstrap([0] * 8, [1] * 8, resamples=100) == Interval(1.0, 1.0, 1.0)
    # nothing changes: the lift is exactly 0 with a zero-width interval
    assert paired_bootstrap([1, 0, 1], [1, 0, 1], resamples=100) == Interval(0.0, 0.0, 0.0)


def test_pooled_bootstrap_averages_runs():
    # run A: every task +1 (lift 1); run B: no change (lift 0). Each run's resampled mean is then
    # constant (1 and 0), so the pooled mean is 0.5 in every resample: a zero-width interval at 0.5.
    pooled = pooled_paired_bootstrap([([0] * 4, [1] * 4), ([1, 0, 1], [1, 0, 1])], resamples=200)
    assert pooled == Interval(0.5, 0.5, 0.5)
    # with one run it is the paired bootstrap itself (same generator draws)
    one = ([0, 1, 0, 1, 0], [1, 1, 0, 0, 1])
    assert pooled_paired_bootstrap([one], resamples=500, seed=3) == paired_bootstrap(
        *one, resamples=500, seed=3
    )
    # averaging two runs' noise narrows the interval relative to either run
    wide = paired_bootstrap(*one, seed=3)
    narrow = pooled_paired_bootstrap([one, one], seed=3)
    assert narrow.high - narrow.low < wide.high - wide.low


@pytest.mark.parametrize("pairs", [[], [([0, 1], [1])], [([], [])]])
def test_pooled_bootstrap_rejects_bad_input(pairs):
    with pytest.raises(ValueError):
        pooled_paired_bootstrap(pairs)


def test_bootstrap_rejects_zero_resamples():
    with pytest.raises(ValueError, match="resamples"):
        paired_bootstrap([0], [1], resamples=0)
