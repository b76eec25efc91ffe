"""Hand-checked tests for agentic_rl.algorithms.returns (discounted returns, GAE, REINFORCE++)."""

import math

import pytest
import torch

from agentic_rl.algorithms import (
    discounted_returns,
    gae_advantages,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
)


def close(actual, expected, atol=1e-6):
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual.double(), expected.double(), atol=atol, rtol=0), (
        f"{actual} != {expected}"
    )


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------- discounted returns


def test_gamma_half_over_four_turns():
    # rewards per turn [0, 0, 0, 1], γ = 0.5:
    # G3 = 1; G2 = 0 + .5*1 = .5; G1 = .25; G0 = .125
    close(discounted_returns(t([0, 0, 0, 1]), gamma=0.5), t([0.125, 0.25, 0.5, 1.0]))
    # rewards [1, 2, 0, 4]: G3 = 4; G2 = 0 + 2 = 2; G1 = 2 + 1 = 3; G0 = 1 + 1.5 = 2.5
    close(discounted_returns(t([1, 2, 0, 4]), gamma=0.5), t([2.5, 3.0, 2.0, 4.0]))


def test_gamma_one_and_zero():
    # γ = 1: suffix sums [1+2+3, 2+3, 3] = [6, 5, 3]; γ = 0: the rewards themselves
    close(discounted_returns(t([1, 2, 3]), gamma=1.0), t([6, 5, 3]))
    close(discounted_returns(t([1, 2, 3]), gamma=0.0), t([1, 2, 3]))


def test_masked_tool_span_in_the_middle_is_skipped():
    # tokens: a a [tool tool tool] b b(r=1); mask 1 1 0 0 0 1 1; γ = 0.5, five steps only:
    # step returns from the end: b2 = 1, b1 = .5, a2 = .25, a1 = .125; tool tokens -> 0
    rewards = t([0, 0, 0, 0, 0, 0, 1])
    mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1]])
    close(discounted_returns(rewards, mask, gamma=0.5), t([0.125, 0.25, 0, 0, 0, 0.5, 1.0]))
    # padding rows of different lengths: row 2 has 2 steps then padding
    rewards = t([0, 2, 0], [3, 1, 0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    close(discounted_returns(rewards, mask, gamma=0.5), t([1, 2, 0], [3.5, 1, 0]))


def test_truncation_bootstraps_termination_does_not():
    # rewards [0, 0], γ = .5, bootstrap V = 4:
    # terminated: [0, 0]; truncated: G1 = 0 + .5*4 = 2, G0 = .5*2 = 1
    r = t([0, 0], [0, 0])
    out = discounted_returns(r, gamma=0.5, terminated=[True, False], bootstrap_values=[4.0, 4.0])
    close(out, t([0, 0], [1, 2]))


def test_returns_bad_inputs():
    with pytest.raises(ValueError, match="mask is 0"):
        discounted_returns(t([1, 1]), torch.tensor([[1, 0]]))
    with pytest.raises(ValueError, match="bootstrap"):
        discounted_returns(t([1, 1]), terminated=[False])
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns(t([1, 1]), gamma=1.5)
    with pytest.raises(ValueError, match="NaN"):
        discounted_returns(t([1, float("nan")]))
    with pytest.raises(ValueError, match="2-D"):
        discounted_returns(torch.ones(3))


# ---------------------------------------------------------------- GAE


def test_gae_hand_values_termination():
    # r = [0, 0, 1], V = [.5, .6, .7], γ = 1, λ = .5, terminated (V after = 0):
    # δ2 = 1 + 0 - .7 = .3;  δ1 = 0 + .7 - .6 = .1;  δ0 = 0 + .6 - .5 = .1
    # A2 = .3;  A1 = .1 + .5*.3 = .25;  A0 = .1 + .5*.25 = .225
    # returns = A + V = [.725, .85, 1.0]
    adv, ret = gae_advantages(t([0, 0, 1]), t([0.5, 0.6, 0.7]), gamma=1.0, lam=0.5)
    close(adv, t([0.225, 0.25, 0.3]))
    close(ret, t([0.725, 0.85, 1.0]))


def test_gae_truncation_vs_termination():
    # r = [0, 1], V = [.5, .5], γ = .9, λ = 1; bootstrap V_boot = 2 on truncation.
    # terminated: δ1 = 1 + 0 - .5 = .5; δ0 = 0 + .9*.5 - .5 = -.05; A0 = -.05 + .9*.5 = .4
    # truncated:  δ1 = 1 + .9*2 - .5 = 2.3; A0 = -.05 + .9*2.3 = 2.02
    r, v = t([0, 1], [0, 1]), t([0.5, 0.5], [0.5, 0.5])
    adv, ret = gae_advantages(
        r, v, gamma=0.9, lam=1.0, terminated=[True, False], bootstrap_values=[2.0, 2.0]
    )
    close(adv, t([0.4, 0.5], [2.02, 2.3]))
    # λ = 1 is Monte Carlo: returns = discounted returns with the bootstrap (2.3+.5=2.8 = 1 + .9*2)
    close(ret, t([0.9, 1.0], [2.52, 2.8]))


def test_gae_lambda_zero_is_td_error_and_lambda_one_is_mc():
    r, v = t([1, 0, 2]), t([0.3, -0.2, 0.4])
    adv0, _ = gae_advantages(r, v, gamma=0.5, lam=0.0)
    # δ = [1 + .5*(-.2) - .3, 0 + .5*.4 + .2, 2 - .4] = [.6, .4, 1.6]
    close(adv0, t([0.6, 0.4, 1.6]))
    adv1, _ = gae_advantages(r, v, gamma=0.5, lam=1.0)
    close(adv1, discounted_returns(r, gamma=0.5) - v)


def test_gae_skips_a_masked_tool_span():
    # steps at 0, 1, 4 (tool output at 2, 3 with garbage values, even NaN), γ = 1, λ = 1,
    # r = 1 on the last step, V = .25 everywhere on steps: A_t = G_t - V_t = 1 - .25 = .75
    r = t([0, 0, 0, 0, 1])
    v = torch.tensor([[0.25, 0.25, float("nan"), 99.0, 0.25]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 1]])
    adv, ret = gae_advantages(r, v, mask, gamma=1.0, lam=1.0)
    close(adv, t([0.75, 0.75, 0, 0, 0.75]))
    close(ret, t([1, 1, 0, 0, 1]))
    # with λ = .5, γ = 1: A4 = .75; A1 = δ1 + .5*A4 = (0 + .25 - .25) + .375 = .375 (the tool
    # span is not a step: V_next of step 1 is V at step 4); A0 = 0 + .5*.375 = .1875
    adv, _ = gae_advantages(r, v, mask, gamma=1.0, lam=0.5)
    close(adv, t([0.1875, 0.375, 0, 0, 0.75]))


def test_gae_bad_inputs():
    with pytest.raises(ValueError, match="values"):
        gae_advantages(t([1, 0]), t([1, 0, 0]))
    with pytest.raises(ValueError, match="values contain"):
        gae_advantages(t([1, 0]), t([float("inf"), 0]))
    with pytest.raises(ValueError, match="lam"):
        gae_advantages(t([1, 0]), t([1, 0]), lam=2.0)


# ---------------------------------------------------------------- REINFORCE++ and whitening


def test_masked_whiten_hand_values_and_constant():
    # values [1, 3] on the mask (the 100 is off-mask): mean 2, std 1 -> [-1, 0(off), 1]
    x = t([1, 100, 3])
    m = torch.tensor([[1, 0, 1]])
    close(masked_whiten(x, m, eps=0.0), t([-1, 0, 1]))
    assert torch.equal(
        masked_whiten(t([0.3, 0.3]), torch.ones(1, 2)), torch.zeros(1, 2, dtype=torch.float64)
    )


def test_reinforce_pp_batch_normalised():
    # R = [1, 0]; row 0 has 2 steps, row 1 has 1 step (+ padding); γ = 1
    # token returns: [1, 1 | 0, pad]; token-weighted mean 2/3, std sqrt(2/9) = .4714
    # A = [(1-2/3)/.4714, same, (0-2/3)/.4714] = [.7071, .7071, -1.4142]
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = reinforce_pp_advantages(torch.tensor([1.0, 0.0]), mask, eps=0.0)
    s = math.sqrt(2 / 9)
    close(adv, t([(1 / 3) / s, (1 / 3) / s], [(-2 / 3) / s, 0]))


def test_reinforce_pp_with_kl_reward_and_baseline():
    # baseline: group [2, 0] -> centred [1, -1]; one step each, token reward (−β·KL) −0.5 on
    # row 0 -> returns [0.5, -1]; mean -.25, std .75 -> A = [1, -1]
    mask = torch.ones(2, 1)
    adv = reinforce_pp_advantages(
        torch.tensor([2.0, 0.0]),
        mask,
        token_rewards=torch.tensor([[-0.5], [0.0]]),
        group_ids=["g", "g"],
        eps=0.0,
    )
    close(adv, t([1], [-1]))
    # all-equal batch -> exactly 0, no NaN
    adv = reinforce_pp_advantages(torch.tensor([1.0, 1.0]), torch.ones(2, 3))
    assert torch.equal(adv, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="at least one step"):
        reinforce_pp_advantages(torch.tensor([1.0]), torch.zeros(1, 2))


# ---------------------------------------------------------------- GRPO batch scope


def test_grpo_batch_scope_std():
    # rewards [1, 0 | 1, 1, 1, 0]... use groups a=[1, 0], b=[0.5, 0.5]:
    # batch std of [1, 0, .5, .5] = sqrt(((.5)^2*2 + 0*2)/4) = sqrt(.125) = .35355
    # group a centred [.5, -.5] / .35355 = [1.4142, -1.4142]; group b constant -> 0
    adv = grpo_advantages(
        torch.tensor([1.0, 0.0, 0.5, 0.5]), ["a", "a", "b", "b"], eps=0.0, std_scope="batch"
    )
    close(adv, torch.tensor([math.sqrt(2), -math.sqrt(2), 0.0, 0.0]))
    assert torch.equal(adv[2:], torch.zeros(2))
    with pytest.raises(ValueError, match="std_scope"):
        grpo_advantages(torch.tensor([1.0, 0.0]), [0, 0], std_scope="world")
