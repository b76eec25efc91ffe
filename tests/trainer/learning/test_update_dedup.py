"""Exact copies of a rollout are trained once with their summed loss weight: same gradient, same metrics."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.policy.model_loading import load_model
from agentic_rl.trainer.learning.update import LossSettings, deduplicate, policy_gradient_update
from agentic_rl.types import StopReason, Trajectory

VOCAB = 49152


def _traj(ids, n_ctx: int, logprobs, tid: str) -> Trajectory:
    mask = (0,) * n_ctx + (1,) * (len(ids) - n_ctx)
    return Trajectory(
        "x-v0",
        0,
        "g",
        tid,
        (),
        (),
        tuple(ids),
        mask,
        tuple(logprobs),
        StopReason.TERMINATED,
        reward=0.0,
    )


def _batch():
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, VOCAB, (12,), generator=g).tolist()
    a = prompt + torch.randint(3, VOCAB, (6,), generator=g).tolist()
    b = prompt + torch.randint(3, VOCAB, (9,), generator=g).tolist()
    lp_a = [0.0] * 12 + [-1.0, -2.0, -0.5, -3.0, -1.5, -0.2]
    lp_b = [0.0] * 12 + [-0.7] * 9
    # a occurs three times (same advantage), b twice with different advantages (not copies)
    trajs = [
        _traj(a, 12, lp_a, "a1"),
        _traj(b, 12, lp_b, "b1"),
        _traj(a, 12, lp_a, "a2"),
        _traj(a, 12, lp_a, "a3"),
        _traj(b, 12, lp_b, "b2"),
    ]
    return trajs, [1.0, -0.5, 1.0, 1.0, 0.25]


def test_deduplicate_by_hand():
    trajs, adv = _batch()
    reps, owner = deduplicate(trajs, adv)
    assert reps == [0, 1, 4]  # a1, b1 and b2 (b2's advantage differs from b1's)
    assert owner == [0, 1, 0, 0, 2]


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_gradient_and_metrics_equal_training_every_copy(tiny_model_dir, loss_agg):
    trajs, adv = _batch()
    # reference: advantages off by 1e-12 make every row distinct, so each copy is its own row
    distinct = [a + 1e-12 * k for k, a in enumerate(adv)]
    base = load_model(tiny_model_dir)
    grads, stats, used = [], [], []
    for advantages in (adv, distinct):
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(
            model.parameters(), lr=0.0
        )  # lr 0: read the gradient, keep the weights
        captured = {}
        optimizer.register_step_pre_hook(
            lambda opt, *_, m=model, c=captured: c.update(
                {
                    i: p.grad.detach().clone()
                    for i, p in enumerate(m.parameters())
                    if p.grad is not None
                }
            )
        )
        result = policy_gradient_update(
            model, optimizer, trajs, advantages, LossSettings(micro_batch_size=2, loss_agg=loss_agg)
        )
        stats.append(result.metrics)
        grads.append(captured)
        used.append(result.advantages)
    assert stats[0]["train/rows_trained"] == 3 and stats[1]["train/rows_trained"] == 5
    assert grads[0] and grads[0].keys() == grads[1].keys()
    for k in grads[1]:
        torch.testing.assert_close(grads[0][k], grads[1][k], rtol=1e-4, atol=1e-6)
    for key in (
        "train/loss",
        "train/entropy",
        "train/ratio_mean",
        "train/logprob_diff",
        "train/advantage_mean",
        "train/tokens",
        "train/clip_fraction",
    ):
        assert stats[0][key] == pytest.approx(stats[1][key], rel=1e-4, abs=1e-6), key
    for a, b in zip(used[0], used[1]):  # every copy gets its advantages recorded
        assert a == pytest.approx(b)
