"""policy_gradient_update's credit options on the tiny random Llama: token-level advantages, loss
aggregation modes, KL as a reward penalty, and PPO's value head with GAE (hand-checked)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from agentic_rl.policy.model_loading import load_model
from agentic_rl.trainer.learning.critic import ValueModel, hidden_size
from agentic_rl.trainer.learning.scoring import pack, score
from agentic_rl.trainer.learning.update import CriticSetup, LossSettings, policy_gradient_update
from agentic_rl.types import StopReason, Trajectory


def _traj(
    length: int, mask: list[int], seed: int, tid: str, stop=StopReason.TERMINATED
) -> Trajectory:
    g = torch.Generator().manual_seed(seed)
    ids = tuple(torch.randint(3, 49152, (length,), generator=g).tolist())
    return Trajectory(
        "x-v0", 0, "g", tid, (), (), ids, tuple(mask), (0.0,) * length, stop, reward=0.0
    )


def _own_logprobs(model, trajs):
    """Old logprobs = the model's own, so ρ = 1 and each token's PPO loss is −A."""
    out = []
    for t in trajs:
        with torch.no_grad():
            lp, _ = score(model, pack([t]))
        full = list(t.logprobs)
        for i, v in zip([i for i, m in enumerate(t.loss_mask) if m and i > 0], lp.tolist()):
            full[i] = v
        out.append(
            Trajectory(
                t.env_id,
                t.seed,
                t.group_id,
                t.trajectory_id,
                (),
                (),
                t.token_ids,
                t.loss_mask,
                tuple(full),
                t.stop_reason,
                reward=t.reward,
            )
        )
    return out


@pytest.fixture
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture
def trajs(model):
    # a: 10 context tokens, 6 sampled; b: 4 context, 3 sampled, a 4-token tool span, 7 sampled
    a = _traj(16, [0] * 10 + [1] * 6, 1, "a")
    b = _traj(18, [0] * 4 + [1] * 3 + [0] * 4 + [1] * 7, 2, "b")
    return _own_logprobs(model, [a, b])


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.0)


@pytest.mark.parametrize(
    "mode, constant, expected",
    [
        # ρ = 1: per-token loss −A; a has 6 tokens with A = 1, b 10 tokens with A = −1
        ("token-mean", None, (-6 + 10) / 16),  # every token weighs 1/16
        ("seq-mean-token-mean", None, (-1 + 1) / 2),  # each sequence's token mean, then the mean
        (
            "seq-mean-token-sum",
            20.0,
            (-6 + 10) / (2 * 20),
        ),  # sums over a constant C = 20, then the mean
    ],
)
def test_loss_aggregation_modes_by_hand(model, trajs, mode, constant, expected):
    stats = policy_gradient_update(
        model,
        _sgd(model),
        trajs,
        [1.0, -1.0],
        LossSettings(micro_batch_size=1, loss_agg=mode, loss_norm_constant=constant),
    ).metrics
    assert stats["train/loss"] == pytest.approx(expected, abs=1e-5)


def test_token_level_advantages_are_used_as_given(model, trajs):
    # b: first span A = 2, second span A = −1 (the tool span in between is not trained)
    b_adv = [0.0] * 4 + [2.0] * 3 + [0.0] * 4 + [-1.0] * 7
    result = policy_gradient_update(
        model, _sgd(model), trajs, [0.5, b_adv], LossSettings(micro_batch_size=2)
    )
    stats, used = result.metrics, result.advantages
    assert used[0] == [0.0] * 10 + [0.5] * 6
    assert used[1] == b_adv
    # L = −(6*.5 + 3*2 − 7) / 16
    assert stats["train/loss"] == pytest.approx(-(3 + 6 - 7) / 16, abs=1e-5)
    with pytest.raises(ValueError, match="token advantages"):
        policy_gradient_update(
            model, _sgd(model), trajs, [0.5, [1.0] * 3], LossSettings(micro_batch_size=1)
        )


def test_kl_as_a_reward_penalty(model, trajs):
    """kl_mode="reward": A_t = A − β Σ_{s ≥ t} k3_s over the trajectory's trained tokens (γ = 1)."""
    ref = copy.deepcopy(model).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    beta = 0.5
    result = policy_gradient_update(
        model,
        _sgd(model),
        trajs[:1],
        [1.0],
        LossSettings(micro_batch_size=1, kl_coef=beta, kl_mode="reward"),
        ref_model=ref,
    )
    stats, used = result.metrics, result.advantages
    with torch.no_grad():
        lp, _ = score(model, pack(trajs[:1]))
        ref_lp, _ = score(ref, pack(trajs[:1]))
    d = ref_lp - lp
    k3 = torch.expm1(d) - d
    expected = 1.0 - beta * k3.flip(0).cumsum(0).flip(0)
    assert torch.allclose(torch.tensor(used[0][10:]), expected, atol=1e-5)
    assert stats["train/kl"] == pytest.approx(float(k3.mean()), abs=1e-6)
    with pytest.raises(ValueError, match="kl_mode"):
        policy_gradient_update(
            model, _sgd(model), trajs, [1.0, 1.0], LossSettings(micro_batch_size=1, kl_mode="both")
        )


def test_critic_gae_from_a_zero_value_head(model, trajs):
    """V ≡ 0 at the start: with γ = λ = 1 every trained token's advantage is its return; b's reward 3
    sits on its last token, a's 1 on its last; b is truncated (bootstrap V_last = 0 here).
    Value loss = ½ · mean over the 16 tokens of R² = ½ (6·1 + 10·9) / 16 = 3."""
    trajs = [trajs[0], dataclasses.replace(trajs[1], stop_reason=StopReason.MAX_TURNS, reward=3.0)]
    rewards = [[0.0] * 15 + [1.0], [0.0] * 17 + [3.0]]
    critic_model = ValueModel(hidden_size(model), lr=1e-2)
    critic = CriticSetup(
        critic_model.head, critic_model.optimizer, rewards, gamma=1.0, lam=1.0, clip_eps=None
    )
    result = policy_gradient_update(
        model, _sgd(model), trajs, None, LossSettings(micro_batch_size=1), critic=critic
    )
    stats, used = result.metrics, result.advantages
    assert used[0] == [0.0] * 10 + [1.0] * 6
    assert used[1] == [0.0] * 4 + [3.0] * 3 + [0.0] * 4 + [3.0] * 7
    assert stats["train/value_loss"] == pytest.approx(3.0, abs=1e-5)
    assert stats["train/value_mean"] == 0.0
    assert critic_model.head.linear.bias.item() == pytest.approx(
        1e-2, abs=1e-6
    )  # Adam's first step: lr·sign
    with pytest.raises(ValueError, match="advantages or a critic"):
        policy_gradient_update(model, _sgd(model), trajs, None, LossSettings(micro_batch_size=1))


def test_critic_update_does_not_depend_on_the_micro_batch_size(tiny_model_dir, trajs):
    rewards = [[0.0] * 15 + [1.0], [0.0] * 6 + [0.5] + [0.0] * 10 + [-1.0]]
    updates = []
    for mbs in (1, 2):
        model = load_model(tiny_model_dir)
        torch.manual_seed(0)
        head = ValueModel(hidden_size(model), lr=1e-2)
        with torch.no_grad():
            head.head.linear.weight.normal_()  # non-zero values so GAE uses them
        before = {k: v.detach().clone() for k, v in model.named_parameters()}
        critic = CriticSetup(head.head, head.optimizer, rewards, gamma=0.9, lam=0.8)
        policy_gradient_update(
            model,
            torch.optim.SGD(model.parameters(), lr=1.0),
            trajs,
            None,
            LossSettings(micro_batch_size=mbs, max_grad_norm=0.0),
            critic=critic,
        )
        updates.append({k: v.detach() - before[k] for k, v in model.named_parameters()})
    assert max(float(u.abs().max()) for u in updates[0].values()) > 1e-5
    for k in updates[0]:
        torch.testing.assert_close(updates[0][k], updates[1][k], atol=1e-5, rtol=0, msg=k)


def test_later_epoch_clips_the_value_loss_around_old_values(model, trajs):
    """old_values given (a later PPO epoch): R = A + V_old. Head V ≡ 0, V_old = −1, A = 1 → R = 0:
    unclipped (0 − 0)² = 0; clipped V = −1 + clip(0 − (−1), ±.2) = −.8 → (−.8)² = .64, the max:
    loss ½·.64 = .32 on every token, all clipped, and the head gets no gradient (clamp saturated)."""
    head = ValueModel(hidden_size(model), lr=1.0)
    old = [[-1.0] * len(t.token_ids) for t in trajs]
    critic = CriticSetup(
        head.head,
        head.optimizer,
        [[0.0] * len(t.token_ids) for t in trajs],
        clip_eps=0.2,
        old_values=old,
    )
    result = policy_gradient_update(
        model, _sgd(model), trajs, [1.0, 1.0], LossSettings(micro_batch_size=2), critic=critic
    )
    stats, used = result.metrics, result.advantages
    assert stats["train/value_loss"] == pytest.approx(0.32, abs=1e-6)
    assert stats["train/value_clip_fraction"] == pytest.approx(1.0)
    assert head.head.linear.bias.item() == 0.0 and used[0][10:] == [1.0] * 6
