"""policy_gradient_update and sft_update on multi-segment trajectories (context resets).

The trajectories are real: the tiny random Llama plays memory-recall-v0 through the rollout
engine, whose sessions wipe the context, so each trajectory has two segments.
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.envs import make
from agentic_rl.policy.hf import HFPolicy
from agentic_rl.policy.model_loading import load_model
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trainer.learning.update import LossSettings, policy_gradient_update, sft_update


@pytest.fixture()
def model(tiny_model_dir, chat):
    from tests.tiny_eos import bias_toward_eos

    return bias_toward_eos(
        load_model(tiny_model_dir), chat.eos_token_id
    )  # replies end: the env answers them


@pytest.fixture()
def trajectories(model, chat):
    cfg = RolloutConfig(max_turns=4, max_new_tokens=6, temperature=1.0)
    envs = [make("memory-recall-v0") for _ in range(3)]
    out = run_episodes(
        HFPolicy(model, chat.eos_token_id, 0),
        chat,
        envs,
        [0, 1, 2],
        ["a", "b", "c"],
        cfg,
        sample_seed=5,
    )
    for env in envs:
        env.close()
    assert all(len(t.segment_starts) == 2 for t in out)
    return out


def test_policy_gradient_on_segments_has_the_right_masks_and_ratios(model, trajectories):
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    advantages = [1.0, -1.0, 0.5]
    result = policy_gradient_update(
        model,
        torch.optim.SGD(model.parameters(), lr=1e-2),
        trajectories,
        advantages,
        LossSettings(micro_batch_size=2),
    )
    stats, used = result.metrics, result.advantages
    sampled = sum(sum(t.loss_mask[1:]) for t in trajectories)
    assert stats["train/tokens"] == float(sampled)
    # the recorded logprobs are the trainer's own, segment by segment: ratio 1, nothing clipped
    assert stats["train/logprob_diff"] < 1e-4
    assert abs(stats["train/ratio_mean"] - 1.0) < 1e-4 and stats["train/clip_fraction"] == 0.0
    for t, a, row in zip(trajectories, advantages, used):
        # the trajectory's advantage on every segment's sampled tokens, 0 on prompts and env text
        assert row == [a if m and i > 0 else 0.0 for i, m in enumerate(t.loss_mask)]
        for start, end in t.segments:
            assert any(t.loss_mask[start:end])  # both segments carry trained tokens
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())


def test_sft_on_segments_runs_and_counts_every_sampled_token(model, trajectories):
    stats = sft_update(
        model, torch.optim.SGD(model.parameters(), lr=0.0), trajectories, micro_batch_size=3
    )
    assert stats["train/tokens"] == float(sum(sum(t.loss_mask[1:]) for t in trajectories))
    # recorded logprobs are exact, so the SFT loss is minus their mean
    recorded = [lp for t in trajectories for lp, m in zip(t.logprobs[1:], t.loss_mask[1:]) if m]
    assert stats["train/loss"] == pytest.approx(-sum(recorded) / len(recorded), abs=1e-4)


def test_critic_gae_runs_over_every_segment_of_a_trajectory(model, trajectories):
    """V ≡ 0 at the start, γ = λ = 1, reward 1 on the last token: every sampled token of both
    segments gets advantage (return) 1; prompts and env text get 0."""
    from agentic_rl.trainer.learning.critic import ValueModel, hidden_size
    from agentic_rl.trainer.learning.update import CriticSetup

    rewards = [[0.0] * (len(t.token_ids) - 1) + [1.0] for t in trajectories]
    head = ValueModel(hidden_size(model), lr=1e-2)
    used = policy_gradient_update(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        trajectories,
        None,
        LossSettings(micro_batch_size=2),
        critic=CriticSetup(head.head, head.optimizer, rewards, gamma=1.0, lam=1.0),
    ).advantages
    for t, row in zip(trajectories, used):
        assert row == [1.0 if m and i > 0 else 0.0 for i, m in enumerate(t.loss_mask)]
