"""Hand-checked tests for agentic_rl.algorithms.losses."""

import math

import pytest
import torch

from agentic_rl.algorithms import (
    KL_ESTIMATORS,
    KL_LOG_RATIO_CLAMP,
    entropy_from_logits,
    estimate_kl,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    ppo_clip_loss,
    token_logprobs_from_logits,
)


def close(actual, expected, atol=1e-6, rtol=1e-5):
    """allclose with a readable failure (torch.testing.assert_close costs ~2 s of imports)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol, rtol=rtol), f"{actual} != {expected}"


def row(*xs):
    return torch.tensor([xs], dtype=torch.float32)


def ppo_one(ratios, advs, **kw):
    """PPO loss on one row with old_logprobs = 0 and logprobs = log(ratio) (a leaf)."""
    logp = torch.log(row(*ratios)).requires_grad_()
    loss, m = ppo_clip_loss(logp, torch.zeros_like(logp), row(*advs), torch.ones_like(logp), **kw)
    loss.backward()
    return loss.item(), m, logp.grad[0]


# ---------------------------------------------------------------- masked_mean


def test_masked_mean_hand_values():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1, 0], [1, 1]])
    assert masked_mean(x, mask).item() == pytest.approx(8 / 3)  # (1 + 3 + 4) / 3
    assert masked_mean(x, mask.bool()).item() == pytest.approx(8 / 3)
    assert masked_mean(x, mask, normalizer=4).item() == pytest.approx(2.0)  # 8 / 4
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0  # empty mask: 0 / max(0, 1)
    x[0, 1] = float("nan")  # masked garbage is ignored
    assert masked_mean(x, mask).item() == pytest.approx(8 / 3)
    with pytest.raises(ValueError):
        masked_mean(x, mask, normalizer=0)


# ---------------------------------------------------------------- PPO clip


def test_ppo_ratio_inside_range_is_plain_surrogate():
    # ratio 1.1, A=1  -> -min(1.1, 1.1) = -1.1
    # ratio 0.9, A=-1 -> -min(-0.9, -0.9) = +0.9      loss = (-1.1 + 0.9) / 2 = -0.1
    loss, m, grad = ppo_one([1.1, 0.9], [1.0, -1.0])
    assert loss == pytest.approx(-0.1, abs=1e-6)
    assert m["clip_fraction"] == 0.0
    assert m["ratio_mean"] == pytest.approx(1.0)
    # approx_kl = mean(old - new) = -(log 1.1 + log 0.9) / 2
    assert m["approx_kl"] == pytest.approx(-(math.log(1.1) + math.log(0.9)) / 2, abs=1e-6)
    # d/dlogp of -ratio*A/2 = -ratio*A/2 -> [-0.55, +0.45]
    close(grad, torch.tensor([-0.55, 0.45]))


def test_ppo_positive_advantage_clipped_above():
    # token 0: ratio 1.5, A=1 -> min(1.5, 1.2) = 1.2 (clipped, no gradient)
    # token 1: ratio 1.0, A=1 -> 1.0                   loss = -(1.2 + 1.0) / 2 = -1.1
    loss, m, grad = ppo_one([1.5, 1.0], [1.0, 1.0])
    assert loss == pytest.approx(-1.1, abs=1e-6)
    assert m["clip_fraction"] == pytest.approx(0.5)
    assert grad[0].item() == 0.0
    assert grad[1].item() == pytest.approx(-0.5)  # -ratio * A / 2


def test_ppo_positive_advantage_low_ratio_not_clipped():
    # ratio 0.5, A=1 -> min(0.5, clip(0.5)=0.8) = 0.5: the unclipped term, full gradient
    loss, m, grad = ppo_one([0.5], [1.0])
    assert loss == pytest.approx(-0.5)
    assert m["clip_fraction"] == 0.0
    assert grad[0].item() == pytest.approx(-0.5)  # -ratio * A


def test_ppo_negative_advantage_clipped_below():
    # ratio 0.5, A=-1 -> min(-0.5, 0.8 * -1) = -0.8 -> loss 0.8, clipped, zero gradient
    loss, m, grad = ppo_one([0.5], [-1.0])
    assert loss == pytest.approx(0.8)
    assert m["clip_fraction"] == 1.0
    assert grad[0].item() == 0.0


def test_ppo_negative_advantage_high_ratio_not_clipped():
    # ratio 1.5, A=-1 -> min(-1.5, 1.2 * -1) = -1.5 -> loss 1.5, unclipped, grad -ratio*A = 1.5
    loss, m, grad = ppo_one([1.5], [-1.0])
    assert loss == pytest.approx(1.5)
    assert m["clip_fraction"] == 0.0
    assert grad[0].item() == pytest.approx(1.5)


def test_ppo_asymmetric_clip_higher():
    # ratio 1.25, A=1: default eps_high .2 clips to 1.2; eps_high .28 leaves 1.25
    assert ppo_one([1.25], [1.0])[0] == pytest.approx(-1.2)
    assert ppo_one([1.25], [1.0], clip_eps_high=0.28)[0] == pytest.approx(-1.25)
    # ratio 0.75, A=-1: eps_low .2 clips to .8 -> loss .8; eps_low .3 leaves .75
    assert ppo_one([0.75], [-1.0], clip_eps_low=0.3)[0] == pytest.approx(0.75)


def test_ppo_masked_garbage_does_not_leak():
    nan, inf = float("nan"), float("inf")
    logp = torch.tensor([[math.log(1.1), -inf, 0.0, nan]], requires_grad=True)
    old = torch.tensor([[0.0, -inf, nan, -inf]])
    adv = torch.tensor([[2.0, nan, 1.0, inf]])
    mask = torch.tensor([[1, 0, 0, 0]])
    loss, m = ppo_clip_loss(logp, old, adv, mask)
    loss.backward()
    assert loss.item() == pytest.approx(-2.2)  # -ratio * A on the one kept token
    assert all(math.isfinite(v) for v in m.values())
    assert torch.isfinite(logp.grad).all()
    assert torch.equal(logp.grad[0, 1:], torch.zeros(3))
    assert logp.grad[0, 0].item() == pytest.approx(-2.2)  # d(-ratio*A)/dlogp = -ratio*A


def test_ppo_normalizer_gives_global_token_mean_across_micro_batches():
    torch.manual_seed(0)
    logp = (0.1 * torch.randn(4, 5)).requires_grad_()
    old, adv = torch.zeros(4, 5), torch.randn(4, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    full, _ = ppo_clip_loss(logp, old, adv, mask)
    (g_full,) = torch.autograd.grad(full, logp)
    n_tokens = float(mask.sum())  # 11
    micro = sum(
        ppo_clip_loss(logp[s], old[s], adv[s], mask[s], normalizer=n_tokens)[0]
        for s in (slice(0, 2), slice(2, 4))
    )
    (g_micro,) = torch.autograd.grad(micro, logp)
    close(micro, full)
    close(g_micro, g_full)


def test_ppo_shape_mismatch_raises():
    with pytest.raises(ValueError, match="advantages"):
        ppo_clip_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 3))


# ---------------------------------------------------------------- KL


def test_kl_estimators_hand_values():
    ln2 = math.log(2)
    logp, ref = torch.tensor([0.0, 0.0]), torch.tensor([ln2, -ln2])
    # d = ref - logp = +-ln2; k3 = e^d - d - 1 -> [2 - ln2 - 1, 0.5 + ln2 - 1]
    close(kl_k3(logp, ref), torch.tensor([1 - ln2, ln2 - 0.5]))
    close(kl_k1(logp, ref), torch.tensor([-ln2, ln2]))
    close(kl_k2(logp, ref), torch.tensor([ln2**2 / 2] * 2))
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}
    assert KL_ESTIMATORS["k3"] is kl_k3


def test_kl_k3_nonnegative_and_zero_when_equal():
    torch.manual_seed(0)
    a, b = torch.randn(64), torch.randn(64)
    assert (kl_k3(a, b) >= 0).all()
    assert torch.equal(kl_k3(a, a), torch.zeros(64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kl_k3_clamps_the_log_ratio_value_grad_and_count(dtype):
    """logp -105 vs ref -5 (d = 100): exp(100) is inf in float32/bf16; clamped at d = 20 instead."""
    logp = torch.tensor([-105.0, -5.0, -1.0, -2.0], dtype=dtype, requires_grad=True)
    ref = torch.tensor([-5.0, -105.0, -2.0, -1.0], dtype=dtype)
    kl, n_clamped = estimate_kl("k3", logp, ref)
    # d = ref - logp = [100, -100, -1, 1] -> clamp to [-20, 20] -> [20, -20, -1, 1]
    # k3 = e^d - d - 1: e^20 - 21 = 485165174.4098, e^-20 + 19 = 19.000000002,
    #                   e^-1 = 0.3678794412, e - 2 = 0.7182818285
    assert KL_LOG_RATIO_CLAMP == 20.0 and kl.dtype == torch.float32
    close(
        kl.detach(),
        torch.tensor([math.exp(20) - 21, math.exp(-20) + 19, math.exp(-1), math.e - 2]),
        rtol=1e-6,
    )
    assert n_clamped == 2  # |d| = 100 > 20 twice
    kl.sum().backward()
    # dk3/dlogp = -(e^d - 1) inside the clamp, 0 where clamped: [0, 0, 1 - e^-1, 1 - e]
    assert torch.isfinite(logp.grad).all()
    close(
        logp.grad.float(),
        torch.tensor([0.0, 0.0, 1 - math.exp(-1), 1 - math.e]),
        atol=1e-2 if dtype != torch.float32 else 1e-6,
        rtol=1e-2 if dtype != torch.float32 else 1e-5,
    )


def test_estimate_kl_k1_k2_never_clamp():
    logp, ref = torch.tensor([-105.0, 0.0]), torch.tensor([-5.0, 0.0])
    # d = [100, 0]: k1 = logp - ref = [-100, 0]; k2 = d^2 / 2 = [5000, 0]; no clamping
    assert estimate_kl("k1", logp, ref)[1] == estimate_kl("k2", logp, ref)[1] == 0
    close(estimate_kl("k1", logp, ref)[0], torch.tensor([-100.0, 0.0]))
    close(estimate_kl("k2", logp, ref)[0], torch.tensor([5000.0, 0.0]))
    with pytest.raises(KeyError, match="k3"):
        estimate_kl("k4", logp, ref)


# ---------------------------------------------------------------- entropy


def test_entropy_hand_values():
    # uniform over 4 -> ln 4; p = [.5, .25, .25] -> .5 ln2 + 2 * .25 ln4 = 1.5 ln2
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [math.log(2), 0.0, 0.0, -math.inf]])
    close(entropy_from_logits(logits), torch.tensor([math.log(4), 1.5 * math.log(2)]))


def test_entropy_deterministic_and_matches_torch():
    logits = torch.tensor([0.0, -math.inf, -math.inf], requires_grad=True)
    h = entropy_from_logits(logits)
    h.backward()
    assert h.item() == 0.0 and torch.isfinite(logits.grad).all()
    torch.manual_seed(0)
    x = torch.randn(2, 3, 11)
    ref = torch.distributions.Categorical(logits=x).entropy()
    close(entropy_from_logits(x), ref)


# ---------------------------------------------------------------- token logprobs


def test_token_logprobs_hand_value():
    # softmax([0, ln3]) = [1/4, 3/4] -> log(3/4); T=2 halves [0, 2 ln3] to the same logits
    expected = torch.tensor([[math.log(0.75)]])
    logits = torch.tensor([[[0.0, math.log(3)]]])
    close(token_logprobs_from_logits(logits, torch.tensor([[1]])), expected)
    out = token_logprobs_from_logits(2 * logits, torch.tensor([[1]]), temperature=2.0)
    close(out, expected)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_match_reference_in_chunks(temperature):
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7, requires_grad=True)  # 6 rows; chunk 4 -> chunks of 4 and 2
    targets = torch.randint(0, 7, (2, 3))
    out = token_logprobs_from_logits(logits, targets, temperature=temperature, chunk_size=4)
    ref = torch.log_softmax(logits / temperature, -1).gather(-1, targets[..., None])[..., 0]
    close(out, ref)
    w = torch.randn(2, 3)
    (g_out,) = torch.autograd.grad((out * w).sum(), logits)
    (g_ref,) = torch.autograd.grad((ref * w).sum(), logits)
    close(g_out, g_ref)
    with torch.no_grad():  # one row per chunk, no autograd graph
        one = token_logprobs_from_logits(logits, targets, temperature=temperature, chunk_size=1)
        assert not one.requires_grad
        close(one, ref.detach())


def test_token_logprobs_bf16_input_gives_float32():
    logits = torch.randn(1, 2, 5).to(torch.bfloat16)
    out = token_logprobs_from_logits(logits, torch.tensor([[0, 4]]))
    assert out.dtype == torch.float32 and out.shape == (1, 2)
    with pytest.raises(ValueError):
        token_logprobs_from_logits(logits, torch.tensor([[0, 4]]), temperature=0.0)


def test_token_logprobs_grad_dtype_and_empty_rows():
    # grads come back in the logits' dtype; d out / d z = onehot(y) - softmax(z)
    logits = torch.zeros(1, 1, 4, dtype=torch.bfloat16, requires_grad=True)
    token_logprobs_from_logits(logits, torch.tensor([[2]])).sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    close(logits.grad.float(), torch.tensor([[[-0.25, -0.25, 0.75, -0.25]]]))
    empty = token_logprobs_from_logits(torch.zeros(0, 3, 5), torch.zeros(0, 3, dtype=torch.long))
    assert empty.shape == (0, 3)
