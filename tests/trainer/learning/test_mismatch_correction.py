"""The sampler/trainer mismatch correction inside the update (TIS, MIS, train/mismatch_kl), on
the tiny random Llama: config checks, hand-computed metrics, no change when the sampler agrees
with the trainer, and a whole tiny training run with the correction on."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.policy.model_loading import load_model
from agentic_rl.trainer.learning.mismatch_correction import old_policy_logprobs
from agentic_rl.trainer.learning.scoring import pack, score
from agentic_rl.trainer.learning.update import LossSettings, policy_gradient_update
from agentic_rl.types import StopReason, Trajectory

VOCAB = 49152


def _trajs(model, shifts: list[float]) -> list[Trajectory]:
    """Two random trajectories (10 context + 6 sampled tokens) whose recorded (sampler) logprobs
    are the model's own minus ``shifts[k]``: trainer/sampler log-ratio = shifts[k] per token."""
    g = torch.Generator().manual_seed(1)
    out = []
    for k, shift in enumerate(shifts):
        ids = tuple(torch.randint(3, VOCAB, (16,), generator=g).tolist())
        mask = (0,) * 10 + (1,) * 6
        t = Trajectory(
            "x-v0", 0, f"g{k}", f"t{k}", (), (), ids, mask, (0.0,) * 16, StopReason.TERMINATED
        )
        with torch.no_grad():
            lp, _ = score(model, pack([t]))
        logprobs = [0.0] * 10 + [v - shift for v in lp.tolist()]
        out.append(dataclasses.replace(t, logprobs=tuple(logprobs)))
    return out


@pytest.fixture
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


def _step(model, trajs, settings, advantages=(1.0, -0.5), **kw):
    m = copy.deepcopy(model)
    optimizer = torch.optim.SGD(m.parameters(), lr=0.5)
    result = policy_gradient_update(m, optimizer, trajs, list(advantages), settings, **kw)
    return m, result.metrics


OFF = LossSettings(micro_batch_size=1)
ON = [
    dataclasses.replace(OFF, tis_cap=2.0),
    dataclasses.replace(OFF, tis_cap=2.0, mis_low=0.5, mis_high=2.0),
    dataclasses.replace(OFF, mis_low=0.5, mis_high=2.0, mis_level="sequence"),
]


@pytest.mark.parametrize("settings", ON, ids=["tis", "tis+mis", "mis-seq"])
def test_correction_changes_nothing_when_the_sampler_is_the_trainer(model, settings):
    """Sampler logprobs = the trainer's: π_old = μ, TIS weight 1, nothing masked, so the loss,
    the metrics and the updated weights are those of the uncorrected step."""
    trajs = _trajs(model, [0.0, 0.0])
    plain, m_off = _step(model, trajs, OFF)
    corrected, m_on = _step(model, trajs, settings)
    assert m_on["train/loss"] == pytest.approx(m_off["train/loss"], abs=1e-6)
    assert m_on["train/ratio_mean"] == pytest.approx(m_off["train/ratio_mean"], abs=1e-6)
    assert m_on["train/mismatch_kl"] == pytest.approx(0.0, abs=1e-6)
    assert m_on["train/tis_capped_fraction"] == 0.0 and m_on["train/mis_masked_fraction"] == 0.0
    # without the correction it is measured against the update's own forward (π_θ = π_old here)
    assert m_off["train/mismatch_kl"] == pytest.approx(0.0, abs=1e-6)
    for (name, a), b in zip(plain.named_parameters(), corrected.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name


def test_metrics_and_loss_by_hand_for_a_shifted_sampler(model):
    """Trajectory 0's sampler is e times less likely than the trainer on each of its 6 tokens
    (log-ratio 1), trajectory 1's agrees (log-ratio 0).

    mismatch_kl = mean k3 = (6·(e − 1 − 1) + 6·0) / 12 = (e − 2) / 2 ≈ 0.3591.
    TIS (cap 2): ratio e > 2 on 6 of 12 tokens -> tis_capped_fraction = 0.5.
    MIS [0.5, 2]: the same 6 tokens drop -> mis_masked_fraction = 0.5.
    """
    trajs = _trajs(model, [1.0, 0.0])
    _, tis = _step(model, trajs, ON[0])
    assert tis["train/mismatch_kl"] == pytest.approx((math.e - 2) / 2, abs=1e-5)
    assert tis["train/tis_capped_fraction"] == 0.5
    assert tis["train/mis_masked_fraction"] == 0.0
    # the ratio is taken against π_old (= π_θ in this first step): exactly 1, never clipped
    assert tis["train/ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert tis["train/clip_fraction"] == 0.0
    # logprob_diff still measures |trainer − sampler|: (6·1 + 6·0) / 12
    assert tis["train/logprob_diff"] == pytest.approx(0.5, abs=1e-5)
    # uncorrected, ρ = e on trajectory 0's tokens: mean (6e + 6) / 12
    _, off = _step(model, trajs, OFF)
    assert off["train/ratio_mean"] == pytest.approx((math.e + 1) / 2, abs=1e-5)
    # logged without the correction too, from the update's forward: the same k3 mean
    assert off["train/mismatch_kl"] == pytest.approx((math.e - 2) / 2, abs=1e-5)

    # the loss: ratio 1, token-mean over 12 tokens; TIS weights 2 (capped e) and 1:
    # L = −(6·2·A0 + 6·1·A1) / 12 with A0 = 1, A1 = −0.5 -> −(12 − 3) / 12 = −0.75
    assert tis["train/loss"] == pytest.approx(-0.75, abs=1e-6)
    _, mis = _step(model, trajs, ON[1])
    assert mis["train/mis_masked_fraction"] == 0.5
    # MIS drops trajectory 0's tokens: L = −(6·1·(−0.5)) / 12 = 0.25
    assert mis["train/loss"] == pytest.approx(0.25, abs=1e-6)
    _, seq = _step(model, trajs, ON[2])  # geometric mean e > 2: the whole sequence drops
    assert seq["train/mis_masked_fraction"] == 0.5
    assert seq["train/loss"] == pytest.approx(0.25, abs=1e-6)


def test_given_old_logprobs_are_used_and_checked(model):
    trajs = _trajs(model, [1.0, 0.0])
    old = old_policy_logprobs(model, trajs, ON[0])
    _, given = _step(model, trajs, ON[0], old_logprobs=old)
    _, scored = _step(model, trajs, ON[0])
    assert given["train/loss"] == pytest.approx(scored["train/loss"], abs=1e-6)
    with pytest.raises(ValueError, match="off"):
        _step(model, trajs, OFF, old_logprobs=old)
    with pytest.raises(ValueError, match="length T"):
        _step(model, trajs, ON[0], old_logprobs=[row[:-1] for row in old])


def test_copies_share_their_representatives_old_logprobs(model):
    """Exact copies are trained once (deduplicate); given π_old is read from the first copy."""
    t = _trajs(model, [1.0])[0]
    trajs = [t, t, _trajs(model, [0.0, 0.0])[1]]
    _, m = _step(model, trajs, ON[1], advantages=(1.0, 1.0, -0.5))
    assert m["train/rows_trained"] == 2.0
    assert m["train/mis_masked_fraction"] == pytest.approx(12 / 18)  # both copies' 12 of 18


@pytest.mark.parametrize(
    "override, key",
    [
        ("loss.tis_cap=0.5", "loss.tis_cap"),
        ("loss.tis_cap=-1.0", "loss.tis_cap"),
        ("loss.mis_high=0.9", "loss.mis_high"),
        ("loss.mis_low=1.5", "loss.mis_low"),
        ("loss.mis_level='turn'", "loss.mis_level"),
    ],
)
def test_bad_correction_settings_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_tiny_training_run_with_the_correction_logs_its_metrics(tiny_model_dir, tmp_path):
    from agentic_rl.trainer.recipe import train
    from agentic_rl.trainer.records.run_dir import MetricsLog
    from tests.recipe_settings import TWO_RL_STEPS

    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            "model.num_threads=1",
            *TWO_RL_STEPS,
            "tracking.tensorboard=false",
            f"output_dir='{tmp_path}'",
            "rollout.max_new_tokens=16",
            "loss.tis_cap=2.0",
            "loss.mis_low=0.5",
            "loss.mis_high=2.0",
            "loss.mis_level='sequence'",
        ],
    )
    run_dir = train(config)
    rl = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r.get("phase") == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        for key in ("train/mismatch_kl", "train/tis_capped_fraction", "train/mis_masked_fraction"):
            assert math.isfinite(r[key]) and r[key] >= 0.0, (key, r)
        # the float32 sampler scores as the trainer does: a tiny mismatch, nothing masked
        assert r["train/mismatch_kl"] < 1e-3 and r["train/mis_masked_fraction"] == 0.0
        assert math.isfinite(r["train/loss"])


def test_pi_old_is_scored_once_per_rl_step(model, tmp_path):
    """Two minibatches (two optimizer steps) in one RL step: the second one's ratio is against
    the π_old scored before the first step, so it moves away from 1 (scored per optimizer step
    it would be exactly 1 in both)."""
    from agentic_rl.config import TrainConfig
    from agentic_rl.config.algorithm import LossConfig, OptimConfig
    from agentic_rl.trainer.recipe import Run, credit_and_update

    base = _trajs(model, [0.0, 0.0, 0.0, 0.0])
    trajs = [
        dataclasses.replace(t, group_id=f"g{k // 2}", reward=float(k % 2))
        for k, t in enumerate(base)
    ]
    config = TrainConfig(
        loss=LossConfig(tis_cap=2.0),
        optim=OptimConfig(micro_batch_size=2, minibatches=2, skip_zero_advantage=False),
    )
    run = Run(config, tmp_path, model, None, None, None, None, None, None)
    stats, _ = credit_and_update(run, torch.optim.SGD(model.parameters(), lr=1.0), None, trajs)
    assert stats["train/optimizer_steps"] == 2.0
    assert abs(stats["train/ratio_mean"] - 1.0) > 1e-4, stats
    assert stats["train/mismatch_kl"] == pytest.approx(0.0, abs=1e-6)
