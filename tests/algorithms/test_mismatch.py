"""Hand-checked tests for agentic_rl.algorithms.mismatch (TIS, MIS, mismatch KL).

Log-probabilities are written as log(p) so every ratio π/μ is a plain number: a trainer
logprob log(0.5) against a sampler logprob log(0.25) is a ratio of 2.
"""

import math

import pytest
import torch

from agentic_rl.algorithms.mismatch import masked_is, mismatch_kl, truncated_is_weights


def logs(*rows):
    """[B, T] float32 log of the given probabilities."""
    return torch.log(torch.tensor(rows, dtype=torch.float64)).float()


def close(actual, expected, atol=1e-6):
    expected = torch.tensor(expected, dtype=actual.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol), f"{actual} != {expected}"


# ---------------------------------------------------------------- truncated IS


def test_tis_weights_are_ratios_capped():
    # ratios: 0.5/0.25 = 2, 0.3/0.6 = 0.5, 0.9/0.3 = 3 -> capped at 2.5, 0.4/0.4 = 1
    trainer = logs([0.5, 0.3], [0.9, 0.4])
    sampler = logs([0.25, 0.6], [0.3, 0.4])
    w = truncated_is_weights(trainer, sampler, cap=2.5)
    close(w, [[2.0, 0.5], [2.5, 1.0]])
    assert w.dtype == torch.float32


def test_tis_weights_are_detached_and_overflow_free():
    trainer = torch.tensor([[0.0, -1.0]], requires_grad=True)
    sampler = torch.tensor([[-1000.0, -1.0]])  # ratio e^1000 would overflow: capped at 2
    w = truncated_is_weights(trainer, sampler, cap=2.0)
    assert not w.requires_grad
    close(w, [[2.0, 1.0]])


def test_tis_rejects_bad_cap_and_shapes():
    a = torch.zeros(2, 3)
    for cap in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="cap"):
            truncated_is_weights(a, a, cap=cap)
    with pytest.raises(ValueError, match="shape"):
        truncated_is_weights(a, torch.zeros(2, 4), cap=2.0)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        truncated_is_weights(torch.zeros(3), torch.zeros(3), cap=2.0)


# ---------------------------------------------------------------- masked IS


def test_mis_token_level_drops_tokens_outside_range():
    # ratios row 0: 1.8, 0.55, 1 ; row 1: 3, 1.25, 0.1 ; range [0.5, 2]
    trainer = logs([0.45, 0.33, 0.2], [0.9, 0.5, 0.01])
    sampler = logs([0.25, 0.6, 0.2], [0.3, 0.4, 0.1])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    m = masked_is(trainer, sampler, mask, low=0.5, high=2.0, level="token")
    # row 0: 1.8 in, 0.55 in, masked -> 0 ; row 1: 3 out, 1.25 in, 0.1 out
    close(m, [[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    assert m.dtype == torch.float32


def test_mis_sequence_level_uses_geometric_mean_over_masked_tokens():
    # row 0: ratios 4 and 0.25 (the third token masked: ratio 100 ignored); geometric mean
    #        sqrt(4 × 0.25) = 1 -> kept, all its masked tokens 1.
    # row 1: ratios 4 and 1.9 -> geometric mean sqrt(7.6) ≈ 2.76 > 2 -> the whole row drops.
    # row 2: ratio 1.5 alone -> kept.  row 3: no masked token -> 0 everywhere (trains nothing).
    trainer = logs([0.8, 0.1, 1.0], [0.8, 0.57, 0.5], [0.6, 0.5, 0.5], [0.5, 0.5, 0.5])
    sampler = logs([0.2, 0.4, 0.01], [0.2, 0.3, 0.5], [0.4, 0.5, 0.5], [0.1, 0.1, 0.1])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]])
    m = masked_is(trainer, sampler, mask, low=0.5, high=2.0, level="sequence")
    close(m, [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # the same rows at token level: row 0 loses both (4 and 0.25 are outside), row 1 keeps its 1.9
    t = masked_is(trainer, sampler, mask, low=0.5, high=2.0, level="token")
    close(t, [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


def test_mis_ignores_garbage_at_masked_positions():
    trainer = torch.tensor([[0.0, float("nan")]])
    sampler = torch.tensor([[0.0, float("-inf")]])
    mask = torch.tensor([[True, False]])
    close(masked_is(trainer, sampler, mask, 0.5, 2.0, "sequence"), [[1.0, 0.0]])
    close(masked_is(trainer, sampler, mask, 0.5, 2.0, "token"), [[1.0, 0.0]])


def test_mis_rejects_bad_ranges_levels_and_shapes():
    a, mask = torch.zeros(1, 2), torch.ones(1, 2)
    for low, high in ((1.5, 2.0), (0.5, 0.9), (-0.1, 2.0), (0.5, float("inf"))):
        with pytest.raises(ValueError, match="low"):
            masked_is(a, a, mask, low, high)
    with pytest.raises(ValueError, match="level"):
        masked_is(a, a, mask, 0.5, 2.0, level="turn")
    with pytest.raises(ValueError, match="mask"):
        masked_is(a, a, torch.ones(1, 3), 0.5, 2.0)


# ---------------------------------------------------------------- mismatch KL


def test_mismatch_kl_is_mean_k3_over_masked_tokens():
    # d = log(π/μ): token 1 ratio 2 -> k3 = 2 - 1 - ln 2 = 0.306853
    #               token 2 ratio 0.5 -> k3 = 0.5 - 1 + ln 2 = 0.193147
    #               token 3 ratio 1 -> 0 ; token 4 masked (ratio 10, ignored)
    trainer = logs([0.5, 0.2], [0.3, 1.0])
    sampler = logs([0.25, 0.4], [0.3, 0.1])
    mask = torch.tensor([[1, 1], [1, 0]])
    kl = mismatch_kl(trainer, sampler, mask)
    expected = ((2 - 1 - math.log(2)) + (0.5 - 1 + math.log(2)) + 0.0) / 3  # = 1/6
    assert kl.item() == pytest.approx(expected, abs=1e-7)
    assert kl.item() == pytest.approx(1 / 6, abs=1e-7)


def test_mismatch_kl_zero_when_equal_or_empty_and_never_negative():
    a = logs([0.3, 0.7])
    assert mismatch_kl(a, a, torch.ones(1, 2)).item() == 0.0
    assert mismatch_kl(a, a + 1.0, torch.zeros(1, 2)).item() == 0.0
    torch.manual_seed(0)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    assert mismatch_kl(x, y, torch.ones(4, 5)).item() >= 0.0
    with pytest.raises(ValueError, match="shape"):
        mismatch_kl(a, a, torch.ones(2, 2))
