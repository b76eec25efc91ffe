"""sft_update and policy_gradient_update on the tiny random Llama (light: no real weights)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from agentic_rl.policy.model_loading import load_model
from agentic_rl.trainer.learning.scoring import pack, score
from agentic_rl.trainer.learning.update import LossSettings, policy_gradient_update, sft_update
from agentic_rl.types import StopReason, Trajectory

VOCAB = 49152


def _traj(ids, n_ctx: int, logprobs=None, tid: str = "t") -> Trajectory:
    """Context ids (mask 0) then generated ids (mask 1); logprobs 0.0 unless given."""
    ids = tuple(int(i) for i in ids)
    mask = (0,) * n_ctx + (1,) * (len(ids) - n_ctx)
    logprobs = tuple(logprobs) if logprobs is not None else (0.0,) * len(ids)
    return Trajectory(
        "x-v0", 0, "g", tid, (), (), ids, mask, logprobs, StopReason.TERMINATED, reward=0.0
    )


def _random_trajs(lengths_ctx: list[tuple[int, int]], seed: int = 0) -> list[Trajectory]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, (length, n_ctx) in enumerate(lengths_ctx):
        ids = torch.randint(3, VOCAB, (length,), generator=g).tolist()
        out.append(_traj(ids, n_ctx, tid=f"t{k}"))
    return out


def _with_current_logprobs(
    model, trajs: list[Trajectory], shift: list[float] | None = None
) -> list[Trajectory]:
    """Set each trajectory's old logprobs to the model's own (plus an optional per-trajectory shift)."""
    out = []
    for k, t in enumerate(trajs):
        with torch.no_grad():
            lp, _ = score(model, pack([t]))
        lp = (lp + (shift[k] if shift else 0.0)).tolist()
        full = list(t.logprobs)
        positions = [i for i, m in enumerate(t.loss_mask) if m and i > 0]
        for i, v in zip(positions, lp):
            full[i] = v
        out.append(_traj(t.token_ids, len(t.token_ids) - sum(t.loss_mask), full, t.trajectory_id))
    return out


def _params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.fixture
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


def test_sft_lowers_the_loss_on_a_fixed_batch(model):
    demos = _random_trajs([(24, 12), (18, 6)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = [
        sft_update(model, optimizer, demos, micro_batch_size=2)["train/loss"] for _ in range(6)
    ]
    # a random model starts near ln(49152) = 10.8 nats per token
    assert abs(losses[0] - math.log(VOCAB)) < 1.0
    assert losses[-1] < losses[0] - 0.5
    assert all(math.isfinite(v) for v in losses)


def test_sft_metrics(model):
    demos = _random_trajs([(20, 10), (15, 5)])
    stats = sft_update(
        model, torch.optim.SGD(model.parameters(), lr=0.0), demos, micro_batch_size=1
    )
    assert stats["train/tokens"] == 20.0  # 10 + 10 generated tokens
    with torch.no_grad():
        nll = -torch.cat([score(model, pack([d]))[0] for d in demos]).mean()
    assert stats["train/loss"] == pytest.approx(float(nll), abs=1e-4)
    assert stats["train/grad_norm"] > 0


def test_sft_rejects_demos_without_trained_tokens(model):
    with pytest.raises(ValueError, match="no trained tokens"):
        sft_update(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            [_traj(range(3, 10), 7)],
            micro_batch_size=1,
        )


def test_policy_gradient_metrics_by_hand(model):
    """With old logprobs = current ones, rho = 1, so each trained token's loss is -A:
    6 tokens with A = +1 and 10 with A = -1 give L = (-6 + 10) / 16 = 0.25."""
    trajs = _with_current_logprobs(model, _random_trajs([(16, 10), (20, 10)]))
    before = _params(model)
    stats = policy_gradient_update(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        trajs,
        [1.0, -1.0],
        LossSettings(micro_batch_size=2),
    ).metrics
    assert stats["train/tokens"] == 16.0
    assert stats["train/loss"] == pytest.approx(0.25, abs=1e-5)
    assert stats["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert stats["train/clip_fraction"] == 0.0
    assert stats["train/logprob_diff"] == pytest.approx(0.0, abs=1e-5)
    assert stats["train/kl"] == 0.0
    assert stats["train/entropy"] > 0 and stats["train/grad_norm"] > 0
    assert all(math.isfinite(v) for v in stats.values())
    after = _params(model)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_zero_advantages_leave_weights_unchanged(model):
    """A = 0 and beta = 0: the gradient is exactly 0, and AdamW (weight_decay 0) then moves nothing:
    m = v = 0, so the step lr * m_hat / (sqrt(v_hat) + eps) is exactly 0."""
    trajs = _with_current_logprobs(model, _random_trajs([(16, 10), (20, 10)]), shift=[0.3, -0.3])
    before = _params(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    stats = policy_gradient_update(
        model, optimizer, trajs, [0.0, 0.0], LossSettings(micro_batch_size=1, kl_coef=0.0)
    ).metrics
    assert stats["train/grad_norm"] == 0.0 and stats["train/loss"] == 0.0
    after = _params(model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def _sgd_step(tiny_model_dir, fn, micro_batch_size):
    model = load_model(tiny_model_dir)
    before = _params(model)
    stats = fn(model, torch.optim.SGD(model.parameters(), lr=1.0), micro_batch_size)
    after = _params(model)
    return {k: after[k] - before[k] for k in before}, stats


def test_micro_batch_size_does_not_change_the_policy_gradient_step(tiny_model_dir):
    """Token-mean over the whole step: micro-batches of 1 and of 4 give the same SGD update."""
    base = load_model(tiny_model_dir)
    # old = current + shift, so rho = exp(-shift):
    #   traj 0: A = 1,    rho = e^0.3  = 1.35 > 1.2 -> clipped (6 tokens)
    #   traj 1: A = -0.5, rho = e^-0.3 = 0.74 < 0.8 -> clipped (20 tokens)
    #   traj 2: A = 0.25, rho = e^-0.1 = 0.90       -> not clipped (5 tokens)
    #   traj 3: A = 2,    rho = 1                   -> not clipped (20 tokens)
    trajs = _with_current_logprobs(
        base, _random_trajs([(12, 6), (30, 10), (20, 15), (25, 5)]), shift=[-0.3, 0.3, 0.1, 0.0]
    )

    def fn(model, opt, mbs):
        return policy_gradient_update(
            model,
            opt,
            trajs,
            [1.0, -0.5, 0.25, 2.0],
            LossSettings(micro_batch_size=mbs, max_grad_norm=0.0),
        ).metrics

    upd1, stats1 = _sgd_step(tiny_model_dir, fn, 1)
    upd4, stats4 = _sgd_step(tiny_model_dir, fn, 4)
    assert max(float(u.abs().max()) for u in upd1.values()) > 1e-4  # a real update
    for k in upd1:
        torch.testing.assert_close(upd1[k], upd4[k], atol=1e-5, rtol=0, msg=k)
    for key in (
        "train/loss",
        "train/clip_fraction",
        "train/ratio_mean",
        "train/logprob_diff",
        "train/tokens",
    ):
        assert stats1[key] == pytest.approx(stats4[key], abs=1e-5)
    assert stats1["train/tokens"] == 51.0  # 6 + 20 + 5 + 20
    assert stats1["train/clip_fraction"] == pytest.approx(26 / 51, abs=1e-6)
    # L = [6 * -(1.2 * 1) + 20 * -(0.8 * -0.5) + 5 * -(e^-0.1 * 0.25) + 20 * -(1 * 2)] / 51
    expected = (6 * -1.2 + 20 * 0.4 + 5 * -(math.exp(-0.1) * 0.25) + 20 * -2.0) / 51
    assert stats1["train/loss"] == pytest.approx(expected, abs=1e-5)
    # |logp - old| = |shift|: (6 * 0.3 + 20 * 0.3 + 5 * 0.1) / 51
    assert stats1["train/logprob_diff"] == pytest.approx(
        (6 * 0.3 + 20 * 0.3 + 5 * 0.1) / 51, abs=1e-5
    )


def test_micro_batch_size_does_not_change_the_sft_step(tiny_model_dir):
    demos = _random_trajs([(12, 6), (30, 10), (20, 15)])

    def fn(model, opt, mbs):
        return sft_update(model, opt, demos, micro_batch_size=mbs, max_grad_norm=0.0)

    upd1, stats1 = _sgd_step(tiny_model_dir, fn, 1)
    upd3, stats3 = _sgd_step(tiny_model_dir, fn, 3)
    for k in upd1:
        torch.testing.assert_close(upd1[k], upd3[k], atol=1e-5, rtol=0, msg=k)
    assert stats1["train/loss"] == pytest.approx(stats3["train/loss"], abs=1e-5)


def test_clip_fraction_by_hand(model):
    """old = current - 0.3: rho = e^0.3 = 1.35 > 1.2 with A > 0 -> every token is clipped (zero gradient)."""
    trajs = _with_current_logprobs(model, _random_trajs([(16, 8)]), shift=[-0.3])
    before = _params(model)
    stats = policy_gradient_update(
        model,
        torch.optim.SGD(model.parameters(), lr=1.0),
        trajs,
        [1.0],
        LossSettings(micro_batch_size=1),
    ).metrics
    assert stats["train/clip_fraction"] == pytest.approx(1.0)
    assert stats["train/ratio_mean"] == pytest.approx(math.exp(0.3), abs=1e-4)
    # L = -min(1.35 * 1, 1.2 * 1) = -1.2 per token; its gradient is 0
    assert stats["train/loss"] == pytest.approx(-1.2, abs=1e-5)
    assert stats["train/grad_norm"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in _params(model).items())


def test_kl_to_an_identical_reference_is_zero(model):
    trajs = _with_current_logprobs(model, _random_trajs([(16, 10)]))
    ref = copy.deepcopy(model).eval()
    stats = policy_gradient_update(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        trajs,
        [1.0],
        LossSettings(micro_batch_size=1, kl_coef=0.1),
        ref_model=ref,
    ).metrics
    assert stats["train/kl"] == pytest.approx(0.0, abs=1e-6)


def test_policy_gradient_argument_errors(model):
    trajs = _random_trajs([(16, 10)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="one advantage per trajectory"):
        policy_gradient_update(model, opt, trajs, [1.0, 2.0], LossSettings(micro_batch_size=1))
    with pytest.raises(ValueError, match="reference model"):
        policy_gradient_update(
            model, opt, trajs, [1.0], LossSettings(micro_batch_size=1, kl_coef=0.1)
        )
    with pytest.raises(ValueError, match="no trained tokens"):
        policy_gradient_update(
            model, opt, [_traj(range(3, 10), 7)], [1.0], LossSettings(micro_batch_size=1)
        )


def test_the_recipe_optimizer_is_fused_adamw_with_the_same_update(tiny_model_dir):

    from agentic_rl.config import OptimConfig
    from agentic_rl.trainer.learning.optim import make_optimizer
    from agentic_rl.trainer.parallel.ranks import Ranks

    def stepped(fused: bool) -> list[torch.Tensor]:
        model = load_model(tiny_model_dir)
        if fused:
            optim = OptimConfig(lr=1e-3, weight_decay=0.01)
            opt = make_optimizer(model.parameters(), optim, Ranks())
            assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["fused"] is True
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        gen = torch.Generator().manual_seed(0)
        for _ in range(3):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        return [p.detach() for p in model.parameters()]

    for a, b in zip(stepped(True), stepped(False)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fast_sampler_samples_from_the_weights_after_a_recipe_optimizer_step(tiny_model_dir, chat):
    """The fused AdamW kernel does not bump the parameters' version counters; the recipe's
    optimizer does (a step hook), so FastPolicy refreshes its weight copies after every step.
    Regression: without it, rollouts and evaluations kept sampling the weights of the first
    sync for a whole run."""

    from agentic_rl.config import OptimConfig
    from agentic_rl.policy.base import GenerationRequest, SamplingParams
    from agentic_rl.policy.fast import FastPolicy
    from agentic_rl.policy.hf import HFPolicy
    from agentic_rl.trainer.learning.optim import make_optimizer
    from agentic_rl.trainer.parallel.ranks import Ranks

    model = load_model(tiny_model_dir)
    opt = make_optimizer(model.parameters(), OptimConfig(lr=1e-2), Ranks())
    assert opt.param_groups[0]["fused"] is True
    reqs = [
        GenerationRequest(
            tuple(chat.encode(f"<|im_start|>user\nhi {i}<|im_end|>\n")), 6, sample_seed=i
        )
        for i in range(2)
    ]
    sampling = SamplingParams(temperature=1.0)
    fast = FastPolicy(model, -1, 0)
    before = fast.generate(reqs, sampling)
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step()
    after, reference = (
        fast.generate(reqs, sampling),
        HFPolicy(model, -1, 0).generate(reqs, sampling),
    )
    for a, r, b in zip(after, reference, before):
        assert a.token_ids == r.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, r.logprobs)) < 1e-4
        assert a.logprobs != b.logprobs  # the update really changed the distribution


def test_micro_batches_cap_rows_and_padded_tokens():
    from agentic_rl.trainer.learning.update import micro_batches

    lengths = [300, 100, 500, 200, 2500, 100]
    # no token cap: sorted by length (1, 5, 3, 0, 2, 4), cut every 4 rows
    assert micro_batches(lengths, 4) == [[1, 5, 3, 0], [2, 4]]
    # cap 1000 padded tokens: [100, 100, 200] is 3 × 200 = 600; adding 300 makes 4 × 300 = 1200 > 1000;
    # [300] then [300, 500] would be 2 × 500 = 1000 <= 1000; 2500 alone (longer than the cap)
    assert micro_batches(lengths, 8, 1000) == [[1, 5, 3], [0, 2], [4]]
    # every index exactly once
    assert sorted(i for mb in micro_batches(lengths, 2, 700) for i in mb) == list(range(6))
    assert micro_batches([], 4, 100) == []
    with pytest.raises(ValueError, match="max_rows"):
        micro_batches(lengths, 0)
    with pytest.raises(ValueError, match="max_tokens"):
        micro_batches(lengths, 1, -1)


def test_micro_batch_tokens_do_not_change_the_policy_gradient_or_sft_step(tiny_model_dir):
    from agentic_rl.trainer.learning.update import micro_batches

    base = load_model(tiny_model_dir)
    trajs = _with_current_logprobs(
        base, _random_trajs([(12, 6), (30, 10), (20, 15), (25, 5)]), shift=[-0.3, 0.3, 0.1, 0.0]
    )
    # a cap of 40 padded tokens: [12, 20] (2 × 20), [25], [30] -> three micro-batches
    assert micro_batches([len(t.token_ids) for t in trajs], 8, 40) == [[0, 2], [3], [1]]

    def pg(model, opt, tokens):
        return policy_gradient_update(
            model,
            opt,
            trajs,
            [1.0, -0.5, 0.25, 2.0],
            LossSettings(micro_batch_size=8, micro_batch_tokens=tokens, max_grad_norm=0.0),
        ).metrics

    def sft(model, opt, tokens):
        return sft_update(
            model, opt, trajs, micro_batch_size=8, micro_batch_tokens=tokens, max_grad_norm=0.0
        )

    for fn in (pg, sft):
        whole, stats_whole = _sgd_step(tiny_model_dir, fn, 0)
        capped, stats_capped = _sgd_step(tiny_model_dir, fn, 40)
        assert max(float(u.abs().max()) for u in whole.values()) > 1e-4  # a real update
        for k in whole:
            torch.testing.assert_close(whole[k], capped[k], atol=1e-5, rtol=0, msg=k)
        assert stats_whole["train/loss"] == pytest.approx(stats_capped["train/loss"], abs=1e-5)
