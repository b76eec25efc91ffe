"""Hand-checked tests for loss aggregation modes, the clipped value loss, dual-clip PPO and the
KL estimator registry."""

import math

import pytest
import torch

from agentic_rl.algorithms import (
    get_kl_estimator,
    kl_k3,
    ppo_clip_loss,
    token_loss_weights,
    value_loss,
)


def test_token_loss_weights_by_hand():
    # two sequences with 1 and 3 trained tokens
    counts = torch.tensor([1, 3])
    # token-mean: 1 / (1 + 3) each
    assert token_loss_weights(counts, "token-mean").tolist() == [0.25, 0.25]
    # seq-mean-token-mean: 1 / (n * T_i) = [1/2, 1/6]
    assert token_loss_weights(counts, "seq-mean-token-mean").tolist() == pytest.approx([0.5, 1 / 6])
    # seq-mean-token-sum with C = 4: 1 / (2 * 4) each
    assert token_loss_weights(counts, "seq-mean-token-sum", norm_constant=4).tolist() == [
        0.125,
        0.125,
    ]


def test_aggregation_bad_inputs():
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        token_loss_weights(torch.tensor([1]), "sum")
    with pytest.raises(ValueError, match="norm_constant"):
        token_loss_weights(torch.tensor([1]), "seq-mean-token-sum")
    with pytest.raises(ValueError, match="no trained tokens"):
        token_loss_weights(torch.tensor([0, 0]))


def test_value_loss_clipped_by_hand():
    # V_old = 0, R = 1, ε = .2:
    #  V = .5: unclipped (.5-1)^2 = .25; V_clip = .2 -> (.2-1)^2 = .64; max -> .64, loss .32
    #  V = .1: inside the range -> both (.1-1)^2 = .81, loss .405
    # mean of [.32, .405] = .3625; the first token is clipped (its gradient is 0)
    v = torch.tensor([0.5, 0.1], requires_grad=True)
    loss, m = value_loss(v, torch.zeros(2), torch.ones(2), torch.ones(2), clip_eps=0.2)
    assert loss.item() == pytest.approx(0.3625)
    assert m["value_clip_fraction"] == 0.5
    loss.backward()
    # d/dV of .5*(V - 1)^2 / 2 tokens = (V - 1)/2 -> [0 (clipped), -.45]
    assert v.grad.tolist() == pytest.approx([0.0, -0.45])
    # unclipped: .5 * mean(.25, .81) = .265
    loss, _ = value_loss(v, torch.zeros(2), torch.ones(2), torch.ones(2), clip_eps=None)
    assert loss.item() == pytest.approx(0.265)


def test_value_loss_explained_variance():
    # perfect predictions explain everything; constant predictions at the mean explain nothing
    r = torch.tensor([1.0, 2.0, 3.0])
    _, m = value_loss(r.clone(), r.clone(), r, torch.ones(3), clip_eps=None)
    assert m["explained_variance"] == pytest.approx(1.0)
    _, m = value_loss(torch.full((3,), 2.0), torch.full((3,), 2.0), r, torch.ones(3), clip_eps=None)
    assert m["explained_variance"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="clip_eps"):
        value_loss(r, r, r, torch.ones(3), clip_eps=0.0)


def test_dual_clip_bounds_negative_advantage_losses():
    # A = -1, ρ = e^2 ≈ 7.39: plain PPO objective min(ρA, clip(ρ)A) = -7.39 -> loss 7.39;
    # dual clip c = 3: max(-7.39, 3 * -1) = -3 -> loss 3, and no gradient
    logp = torch.tensor([2.0], requires_grad=True)
    old, adv, mask = torch.zeros(1), torch.tensor([-1.0]), torch.ones(1)
    plain, _ = ppo_clip_loss(logp, old, adv, mask)
    assert plain.item() == pytest.approx(math.exp(2))
    loss, _ = ppo_clip_loss(logp, old, adv, mask, dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)
    loss.backward()
    assert logp.grad.item() == 0.0
    # positive advantages are untouched: A = 1, ρ = e^2 -> clipped at 1.2 -> loss -1.2
    pos, _ = ppo_clip_loss(logp.detach(), old, torch.ones(1), mask, dual_clip=3.0)
    assert pos.item() == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(logp, old, adv, mask, dual_clip=0.5)


def test_kl_registry_and_k3_properties():
    assert get_kl_estimator("k3") is kl_k3
    with pytest.raises(KeyError, match="k1, k2, k3"):
        get_kl_estimator("k4")
    # k3 >= 0 everywhere and exactly 0 when the policies match
    torch.manual_seed(1)
    a, b = torch.randn(100) * 3, torch.randn(100) * 3
    assert (kl_k3(a, b) >= 0).all()
    assert torch.equal(kl_k3(b, b), torch.zeros(100))
