"""Hand-checked tests for agentic_rl.algorithms.advantages."""

import math

import pytest
import torch

from agentic_rl.algorithms import (
    dr_grpo_advantages,
    grpo_advantages,
    rloo_advantages,
)


def close(actual, expected, atol=1e-6, rtol=1e-5):
    """allclose with a readable failure (torch.testing.assert_close costs ~2 s of imports)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol, rtol=rtol), f"{actual} != {expected}"


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


# ---------------------------------------------------------------- GRPO


def test_grpo_one_group_hand_values():
    # rewards [1,0,1,0]: mean 0.5, population std sqrt(mean([.25]*4)) = 0.5
    # A = (+-0.5) / (0.5 + eps) = +-1 (eps=1e-6 shifts it by ~2e-6)
    adv = grpo_advantages(t(1, 0, 1, 0), [0, 0, 0, 0])
    close(adv, t(1, -1, 1, -1), atol=1e-5, rtol=0)
    # eps = 0 removes the shift entirely
    adv0 = grpo_advantages(t(1, 0, 1, 0), [0, 0, 0, 0], eps=0.0)
    close(adv0, t(1, -1, 1, -1), atol=1e-7, rtol=0)


def test_grpo_uses_population_std():
    # rewards [1,0]: mean .5; population std .5 -> A = [1,-1];
    # the unbiased std would be sqrt(.5) = .7071 -> A = [.7071, -.7071]
    adv = grpo_advantages(t(1, 0), ["x", "x"], eps=0.0)
    close(adv, t(1, -1))


def test_grpo_two_interleaved_groups():
    # group a: [2, 0]    mean 1, std 1               -> [1, -1]
    # group b: [1, 2, 3] mean 2, std sqrt(2/3)=.8165 -> [-1.2247, 0, 1.2247]
    rewards = t(2, 1, 0, 2, 3)
    ids = ["a", "b", "a", "b", "b"]
    s = math.sqrt(1.5)  # 1 / sqrt(2/3)
    adv = grpo_advantages(rewards, ids, eps=0.0)
    close(adv, t(1, -s, -1, 0, s))


def test_grpo_all_equal_group_is_exactly_zero():
    # 0.3 is not exact in binary: a float mean of [.3,.3,.3] need not equal .3,
    # yet the constant group must give exact zeros (no 1e-8 residue, no NaN).
    adv = grpo_advantages(t(0.3, 0.3, 0.3), [7, 7, 7])
    assert torch.equal(adv, torch.zeros(3))
    adv = grpo_advantages(t(0.3, 0.3, 0.3), [7, 7, 7], eps=0.0)
    assert torch.equal(adv, torch.zeros(3))
    # next to a non-constant group, only the constant one is zeroed
    adv = grpo_advantages(t(5, 5, 1, 0), ["c", "c", "d", "d"], eps=0.0)
    close(adv, t(0, 0, 1, -1), atol=0, rtol=0)


def test_grpo_group_of_size_one_is_zero():
    adv = grpo_advantages(t(3.0, 1, 0), ["solo", "g", "g"], eps=0.0)
    assert adv[0].item() == 0.0
    close(adv[1:], t(1, -1))
    assert not torch.isnan(adv).any()


def test_dr_grpo_no_std_division():
    # [1,0,1,0]: mean .5 -> A = r - .5
    expected = t(0.5, -0.5, 0.5, -0.5)
    close(grpo_advantages(t(1, 0, 1, 0), [0] * 4, normalize_std=False), expected)
    close(dr_grpo_advantages(t(1, 0, 1, 0), [0] * 4), expected)
    # [2, 4] mean 3 -> [-1, 1]; constant group -> exact 0
    adv = dr_grpo_advantages(t(2, 4, 0.1, 0.1, 0.1), [1, 1, 2, 2, 2])
    assert torch.equal(adv, t(-1, 1, 0, 0, 0))


def test_advantages_dtype_and_no_grad():
    r = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    adv = grpo_advantages(r, [0, 0])
    assert adv.dtype == torch.float64 and not adv.requires_grad
    adv = grpo_advantages(torch.tensor([1.0, 0.0], dtype=torch.bfloat16), [0, 0])
    assert adv.dtype == torch.float32


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="group_ids"):
        grpo_advantages(t(1, 0), [0])
    with pytest.raises(ValueError, match="NaN"):
        grpo_advantages(t(1, float("nan")), [0, 0])
    with pytest.raises(ValueError, match="1-D"):
        rloo_advantages(torch.zeros(2, 2), [0, 0])


# ---------------------------------------------------------------- RLOO


def test_rloo_hand_values():
    # [3,1,2]: A0 = 3 - (1+2)/2 = 1.5, A1 = 1 - (3+2)/2 = -1.5, A2 = 2 - (3+1)/2 = 0
    # group 2: [1, 0] -> [1 - 0, 0 - 1] = [1, -1]
    adv = rloo_advantages(t(3, 1, 1, 2, 0), ["g", "g", "h", "g", "h"])
    close(adv, t(1.5, -1.5, 1, 0, -1))


def test_rloo_size_one_and_constant_groups_are_zero():
    adv = rloo_advantages(t(4, 0.3, 0.3, 0.3), ["solo", "c", "c", "c"])
    assert torch.equal(adv, torch.zeros(4))


# ---------------------------------------------------------------- tokens + registry
