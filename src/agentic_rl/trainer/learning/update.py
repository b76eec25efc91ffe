"""One optimizer step: supervised (warm-up) or policy-gradient (PPO-clip / GRPO / PPO with a critic).

Both steps run over micro-batches of trajectories (gradient accumulation) with per-token loss
weights fixed for the *whole* step, so the result does not depend on the micro-batch size.
The default weights are one global token-mean (DAPO, Yu et al. 2025, arXiv:2503.14476); the
other aggregation modes and their biases are in :func:`agentic_rl.algorithms.token_loss_weights`.

Policy-gradient loss per trained token (Schulman et al. 2017, arXiv:1707.06347; GRPO, Shao et
al. 2024, arXiv:2402.03300)::

    L = −min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A) [dual clip: max(·, c·A) for A < 0]
        + β · k(π_θ, π_ref)   (kl_mode "loss")            ρ = exp(logp − old_logp)

``old_logp`` is the logprob recorded at sampling (the behaviour policy), so ρ corrects any
mismatch between the sampler and the trainer; ``train/logprob_diff`` logs that mismatch. With
the mismatch correction on (``tis_cap``, ``mis_low``/``mis_high``), ``old_logp`` is instead the
trainer's own π_old and each token's loss is weighted by min(π_old/μ, C) and/or masked
(:mod:`agentic_rl.trainer.learning.mismatch_correction`).
A trajectory whose context was rebuilt during the rollout (several ``segment_starts``) is scored
one segment per sequence (:mod:`agentic_rl.trainer.learning.scoring`), so ρ compares each token under the
prefix it was sampled from; the trajectory's advantage applies to every segment's sampled tokens.

Advantages come in one of three ways: one number per trajectory (broadcast to its tokens),
one number per token (turn-level credit spread over each turn's tokens), or — with a
:class:`~agentic_rl.trainer.learning.critic.CriticSetup` — computed inside the step by GAE(λ)
from a value head that reads the hidden states of this same forward pass (no second pass).
With ``kl_mode="reward"`` the KL estimate is a per-token reward penalty −β·k_t instead: its
discounted return is added to the given advantages, or it enters the token rewards before GAE (InstructGPT-style).

The step takes the batch (trajectories and their advantages), the policy, its optimizer and one
:class:`LossSettings`, and returns an :class:`UpdateResult`: the metrics and, per trajectory,
the advantages the loss used (and the critic's values), for the run's records and later epochs.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

from agentic_rl.algorithms import (
    KL_LOG_RATIO_CLAMP,
    discounted_returns,
    estimate_kl,
    ppo_clip_loss,
    token_loss_weights,
)
from agentic_rl.trainer.learning.batching import (
    Advantage,
    collapse_copies,
    deduplicate,
    dense,
    micro_batches,
    per_token,
    token_rows,
)
from agentic_rl.trainer.learning.critic import CriticSetup, capture_head_inputs, critic_advantages
from agentic_rl.trainer.learning.guards import check_finite
from agentic_rl.trainer.learning.mismatch_correction import correction_terms, step_correction
from agentic_rl.trainer.learning.scoring import PackedBatch, forward_context, pack, score
from agentic_rl.types import Trajectory

__all__ = [
    "Advantage",
    "CriticSetup",
    "LossSettings",
    "UpdateResult",
    "deduplicate",
    "micro_batches",
    "policy_gradient_update",
    "sft_update",
]


@dataclass(frozen=True)
class LossSettings:
    """Everything one policy-gradient step reads besides its batch (built from a run's config by
    :func:`agentic_rl.trainer.run.loss_settings`).

    Attributes:
        micro_batch_size, micro_batch_tokens: most trajectories and padded tokens per
            forward/backward (:func:`micro_batches`; 0 tokens = no cap); the gradient does not
            depend on them.
        clip_eps_low, clip_eps_high: PPO clip range [1 − low, 1 + high].
        dual_clip: c > 1 of dual-clip PPO, or None.
        kl_coef: β; needs a reference model when > 0. kl_estimator: ``k1``/``k2``/``k3``.
        kl_mode: ``"loss"`` (β·agg(k) added to the loss) or ``"reward"`` (−β·k_t per-token
            reward, discounted with ``gamma`` into the advantages, or into the critic's rewards).
        temperature: sampling temperature of the rollouts (logits are divided by it).
        max_grad_norm: gradient clipping of the policy (0 = off).
        loss_agg, loss_norm_constant: loss aggregation (``token-mean``, ``seq-mean-token-mean``,
            ``seq-mean-token-sum`` with constant C, None = its default), see
            :func:`~agentic_rl.algorithms.token_loss_weights`.
        gamma: discount of the KL reward penalty's return (``kl_mode = "reward"``).
        tis_cap: C of truncated importance sampling min(π_old/μ, C) (0 = off).
        mis_low, mis_high: masked importance sampling's kept range of π_old/μ (0 and 0 = off;
            0 for one bound = no bound on that side). mis_level: ``token`` or ``sequence``.
            (:mod:`agentic_rl.trainer.learning.mismatch_correction`.)
        precision: the run's precision (:mod:`agentic_rl.policy.device`): ``bf16-mixed`` runs
            the forward passes under bf16 autocast
            (:func:`~agentic_rl.trainer.learning.scoring.forward_context`).
    """

    micro_batch_size: int = 8
    micro_batch_tokens: int = 0
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    dual_clip: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_mode: str = "loss"
    temperature: float = 1.0
    max_grad_norm: float = 1.0
    loss_agg: str = "token-mean"
    loss_norm_constant: float | None = None
    gamma: float = 1.0
    tis_cap: float = 0.0
    mis_low: float = 0.0
    mis_high: float = 0.0
    mis_level: str = "token"
    precision: str = "fp32"


@dataclass(frozen=True)
class UpdateResult:
    """What one policy-gradient step returns.

    Attributes:
        metrics: ``train/*`` metrics of the step (see :func:`policy_gradient_update`).
        advantages: per input trajectory, a list of length T (its ``token_ids``): the advantage
            the loss used at each trained token, 0 elsewhere.
        values: with a critic, per trajectory the value head's V at each trained token (length
            T, 0 elsewhere), to pass as ``CriticSetup.old_values`` to a later epoch; else None.
    """

    metrics: dict[str, float]
    advantages: list[list[float]]
    values: list[list[float]] | None = None

    @classmethod
    def untrained(cls, trajectories: Sequence[Trajectory]) -> UpdateResult:
        """The result of a rank that trained nothing (all-zero advantages, no metrics)."""
        return cls({}, [[0.0] * len(t.token_ids) for t in trajectories], None)


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _finish_step(model, optimizer, max_grad_norm: float) -> float:
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(
        params, max_grad_norm if max_grad_norm > 0 else float("inf")
    )
    check_finite(
        norm, "gradient norm"
    )  # before the step: a NaN/inf gradient never reaches the weights
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


def sft_update(
    model,
    optimizer,
    demos: Sequence[Trajectory],
    *,
    micro_batch_size: int,
    micro_batch_tokens: int = 0,
    max_grad_norm: float = 1.0,
    precision: str = "fp32",
) -> dict[str, float]:
    """One supervised step: maximise the logprob of the sampled (loss-mask 1) tokens of ``demos``.

    Micro-batches: at most ``micro_batch_size`` demos and ``micro_batch_tokens`` padded tokens
    each (:func:`micro_batches`; 0 = no token cap). ``precision``: as
    :attr:`LossSettings.precision`.

    Returns:
        metrics ``train/loss`` (mean negative log-likelihood per trained token),
        ``train/grad_norm``, ``train/tokens``.

    Raises:
        ValueError: no trained token in ``demos``.
    """
    total = sum(max(sum(t.loss_mask[1:]), 0) for t in demos)
    if total == 0:
        raise ValueError("sft_update: the demonstrations have no trained tokens")
    model.train()
    loss_sum = 0.0
    for idx in micro_batches(
        [len(t.token_ids) for t in demos], micro_batch_size, micro_batch_tokens
    ):
        batch = pack([demos[i] for i in idx], _device(model))
        with forward_context(model, precision):
            logprobs, _ = score(model, batch)
        loss = -logprobs.sum() / total
        loss.backward()
        loss_sum += loss.item() * total
    check_finite(loss_sum, "warm-up (SFT) loss")
    grad_norm = _finish_step(model, optimizer, max_grad_norm)
    return {
        "train/loss": loss_sum / total,
        "train/grad_norm": grad_norm,
        "train/tokens": float(total),
    }


def _check_inputs(trajectories, advantages, critic, kl_coef, kl_mode, ref_model) -> Tensor:
    """Raise ValueError on inconsistent inputs; return the trained tokens per trajectory [B]."""
    if kl_mode not in ("loss", "reward"):
        raise ValueError(f"kl_mode must be 'loss' or 'reward', got {kl_mode!r}")
    if kl_coef > 0 and ref_model is None:
        raise ValueError("kl_coef > 0 needs a reference model")
    fresh_critic = critic is not None and critic.old_values is None
    if advantages is None and not fresh_critic:
        raise ValueError("policy_gradient_update needs advantages or a critic")
    per_traj = critic.token_rewards if fresh_critic else advantages
    if len(per_traj) != len(trajectories):
        raise ValueError(
            "critic.token_rewards needs one list per trajectory"
            if fresh_critic
            else "one advantage per trajectory is required"
        )
    if (
        critic is not None
        and critic.old_values is not None
        and len(critic.old_values) != len(trajectories)
    ):
        raise ValueError("critic.old_values needs one list per trajectory")
    for t, a in zip(trajectories, per_traj):
        if not isinstance(a, (int, float)) and len(a) != len(t.token_ids):
            raise ValueError(
                f"trajectory {t.trajectory_id}: {len(a)} token advantages/rewards for "
                f"{len(t.token_ids)} tokens"
            )
    counts = torch.tensor([max(sum(t.loss_mask[1:]), 0) for t in trajectories])
    if int(counts.sum()) == 0:
        raise ValueError("policy_gradient_update: no trained tokens")
    return counts


_SUMS = (
    "kl",
    "clip_fraction",
    "ratio_mean",
    "entropy",
    "logprob_diff",
    "value_loss",
    "value_clip_fraction",
    "explained_variance",
    "value_mean",
    "kl_clamped",
    "mismatch_kl",
)


def policy_gradient_update(
    model,
    optimizer,
    trajectories: Sequence[Trajectory],
    advantages: Sequence[Advantage] | None,
    settings: LossSettings = LossSettings(),
    *,
    critic: CriticSetup | None = None,
    ref_model=None,
    old_logprobs: Sequence[Sequence[float]] | None = None,
) -> UpdateResult:
    """One PPO-clip step on ``trajectories`` (one ``optimizer.step()``, and the critic's).

    Args:
        model, optimizer: the policy (HF causal LM) and its optimizer.
        trajectories: scored, non-failed trajectories (token streams with old logprobs).
        advantages: per trajectory, one number (broadcast to its trained tokens) or a list of
            length T aligned with its ``token_ids`` (read at trained tokens); None with a fresh
            critic.
        settings: the loss, KL and micro-batching settings (:class:`LossSettings`).
        critic: PPO's value head and token rewards; advantages then come from GAE in this pass.
        ref_model: the reference policy of the KL term (needed when ``settings.kl_coef > 0``).
        old_logprobs: π_old per trajectory (token-aligned) with the mismatch correction on.

    Returns:
        an :class:`UpdateResult`; metrics ``train/loss``, ``train/kl`` (mean per token of the
        estimator; 0 without reference), ``train/clip_fraction``, ``train/ratio_mean``,
        ``train/entropy``, ``train/logprob_diff`` (mean |logp_train − logp_sampled|),
        ``train/mismatch_kl`` (k3 of KL(μ‖π_θ) per token; KL(μ‖π_old) with the correction on),
        ``train/advantage_mean``, ``train/grad_norm``, ``train/tokens``, ``train/rows_trained``
        (distinct rows read, :func:`deduplicate`); with a reference ``train/kl_clamped_fraction``
        (tokens whose k3 log-ratio hit ``KL_LOG_RATIO_CLAMP``); with a critic ``train/value_loss``,
        ``train/value_clip_fraction``, ``train/explained_variance``, ``train/value_mean``; with
        the mismatch correction those of :func:`~agentic_rl.trainer.learning.mismatch_correction.step_correction`.

    Raises:
        ValueError: lengths differ, no trained token, ``kl_coef > 0`` without ``ref_model``,
            bad ``kl_mode``/``loss_agg``, or neither advantages nor critic.
    """
    s = settings
    counts = _check_inputs(trajectories, advantages, critic, s.kl_coef, s.kl_mode, ref_model)
    total = int(counts.sum())
    seq_weights = token_loss_weights(counts, s.loss_agg, norm_constant=s.loss_norm_constant)
    sums = {**dict.fromkeys(_SUMS, 0.0), "loss": 0.0, "advantage": 0.0}
    values = [[0.0] * len(t.token_ids) for t in trajectories] if critic is not None else None
    # exact copies are trained once with their summed loss weight (a critic reads per-row values: off then)
    rows, row_advantages, seq_weights, owner, multiplicity = collapse_copies(
        trajectories, advantages, seq_weights, enabled=critic is None
    )
    used = [[0.0] * len(t.token_ids) for t in rows]
    row_old, mismatch = step_correction(model, trajectories, rows, owner, old_logprobs, s)
    model.train()
    device = _device(model)
    weights = seq_weights.to(device), multiplicity.to(device)
    for idx in micro_batches(
        [len(t.token_ids) for t in rows], s.micro_batch_size, s.micro_batch_tokens
    ):
        mb = [rows[i] for i in idx]
        batch = pack(mb, device)
        if batch.num_tokens == 0:
            continue
        adv, vals, mb_sums = _micro_step(
            model, batch, mb, idx, row_advantages, s, critic, ref_model, weights, total, row_old
        )
        for k, v in mb_sums.items():
            sums[k] += v
        lengths = [len(t.token_ids) for t in mb]
        for i, row in zip(idx, token_rows(adv, batch, lengths)):
            used[i] = row
        for i, row in zip(idx, token_rows(vals, batch, lengths) if vals is not None else []):
            values[i] = row
    check_finite(sums["loss"], "policy-gradient loss")
    grad_norm = _finish_step(model, optimizer, s.max_grad_norm)
    metrics = _metrics(sums, total, critic is not None, ref_model is not None)
    if critic is not None:
        _finish_step(critic.head, critic.optimizer, critic.max_grad_norm)
    metrics |= {"train/grad_norm": grad_norm, "train/tokens": float(total), **mismatch}
    metrics["train/rows_trained"] = float(len(rows))
    per_input = [list(used[j if owner is None else owner[j]]) for j in range(len(trajectories))]
    return UpdateResult(metrics, per_input, values)


def _micro_step(
    model,
    batch: PackedBatch,
    mb: Sequence[Trajectory],
    idx: Sequence[int],
    advantages: Sequence[Advantage] | None,
    s: LossSettings,
    critic: CriticSetup | None,
    ref_model,
    row_weights: tuple[Tensor, Tensor],
    total: int,
    row_old: Sequence[Sequence[float]] | None = None,
) -> tuple[Tensor, Tensor | None, dict[str, float]]:
    """Forward, loss and backward of one micro-batch (rows ``idx``). ``row_weights`` =
    (sequence loss weights [R], copies per row [R]); ``total``: the step's trained tokens;
    ``row_old``: π_old per row with the mismatch correction on (else None: ratio against μ).

    Returns:
        the advantages [N] its loss used, the critic's values [N] (None without a critic), and
        its metric sums (keys of ``_SUMS``, ``loss``, ``advantage``).
    """
    sums: dict[str, float] = {}
    with (
        capture_head_inputs(model) if critic is not None else nullcontext() as captured,
        forward_context(model, s.precision),
    ):
        logprobs, entropy = score(model, batch, temperature=s.temperature, with_entropy=True)
    kl = torch.zeros_like(logprobs)
    if ref_model is not None:
        with torch.no_grad(), forward_context(ref_model, s.precision):
            ref_logprobs, _ = score(ref_model, batch, temperature=s.temperature)
        kl, _ = estimate_kl(s.kl_estimator, logprobs, ref_logprobs)
    penalty = -s.kl_coef * kl.detach() if s.kl_mode == "reward" and s.kl_coef > 0 else None
    values = vloss = None
    if critic is None:
        adv = _given_advantages(advantages, penalty, idx, batch, s.gamma)
    else:
        adv, values, vloss, vm = critic_advantages(
            critic, captured[-1], advantages, penalty, idx, batch, mb, total
        )
        sums.update(vm)
    rows = torch.as_tensor(idx, device=logprobs.device)
    weights = row_weights[0][rows][batch.rows]
    copies = row_weights[1][rows][batch.rows].float()
    old, pg_factor, keep = correction_terms(row_old, idx, batch, s)
    loss, _ = ppo_clip_loss(
        logprobs,
        old,
        adv.to(logprobs.device),
        weights if pg_factor is None else weights * pg_factor.to(weights.dtype),
        clip_eps_low=s.clip_eps_low,
        clip_eps_high=s.clip_eps_high,
        normalizer=1.0,
        dual_clip=s.dual_clip,
    )
    if s.kl_mode == "loss" and s.kl_coef > 0:
        kept = weights if keep is None else weights * keep.to(weights.dtype)
        loss = loss + s.kl_coef * (kl * kept).sum()
    (loss if vloss is None else loss + vloss).backward()
    sums["loss"] = loss.item()
    sums |= _token_sums(
        logprobs,
        old,
        adv,
        kl,
        entropy,
        copies,
        s.clip_eps_low,
        s.clip_eps_high,
    )
    if row_old is not None:  # logprob_diff stays |trainer − sampler|
        diff = (logprobs.detach() - batch.old_logprobs).abs()
        sums["logprob_diff"] = float((diff * copies).sum())
    if ref_model is not None and s.kl_estimator == "k3":
        hit = (ref_logprobs.float() - logprobs.detach().float()).abs() > KL_LOG_RATIO_CLAMP
        sums["kl_clamped"] = float((hit.float() * copies).sum())
    return adv, values, sums


def _given_advantages(
    advantages, penalty: Tensor | None, idx, batch: PackedBatch, gamma: float
) -> Tensor:
    """[N] advantages of a micro-batch without a critic: the given ones, plus the discounted
    return of the per-token KL ``penalty`` [N] when given (``kl_mode = "reward"``)."""
    adv = per_token(advantages, idx, batch)
    if penalty is not None:
        returns = discounted_returns(dense(penalty, batch), batch.target_mask, gamma=gamma)
        adv = adv + returns[batch.target_mask].float()
    return adv


def _metrics(
    sums: dict[str, float], total: int, with_critic: bool, with_ref: bool
) -> dict[str, float]:
    """The step's per-token means of ``sums`` (``train/loss`` and ``train/value_loss`` are
    already normalised)."""
    out = {"train/loss": sums["loss"], "train/advantage_mean": sums["advantage"] / total}
    keys = _SUMS[:9] if with_critic else _SUMS[:5]
    out.update({f"train/{k}": sums[k] / total for k in keys})
    if with_critic:
        out["train/value_loss"] = sums["value_loss"]  # already normalised by the step's tokens
    if with_ref:
        out["train/kl_clamped_fraction"] = sums["kl_clamped"] / total
    out["train/mismatch_kl"] = sums["mismatch_kl"] / total
    return out


def _token_sums(
    logprobs: Tensor,
    old_logprobs: Tensor,
    adv: Tensor,
    kl: Tensor,
    entropy: Tensor,
    copies: Tensor,
    clip_eps_low: float,
    clip_eps_high: float,
) -> dict[str, float]:
    """A micro-batch's per-token metric sums (inputs all [N]), each distinct row counted
    ``copies`` times (so the metrics are those of every input row); clip fraction as in
    :func:`~agentic_rl.algorithms.ppo_clip_loss` (the clipped term active)."""
    ratio = torch.exp(logprobs.detach() - old_logprobs)
    # k3 of KL(old‖π_θ), old the sampler μ (correction off): e^d − 1 − d, d = logπ − logμ
    d = (logprobs.detach().double() - old_logprobs.double()).clamp(
        -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP
    )
    a = adv.to(ratio.device)
    clipped = (
        ((ratio > 1 + clip_eps_high) & (a > 0)) | ((ratio < 1 - clip_eps_low) & (a < 0))
    ).float()
    return {
        "kl": float((kl.detach() * copies).sum()),
        "clip_fraction": float((clipped * copies).sum()),
        "ratio_mean": float((ratio * copies).sum()),
        "entropy": float((entropy * copies).sum()),
        "logprob_diff": float(((logprobs.detach() - old_logprobs).abs() * copies).sum()),
        "advantage": float((a * copies).sum()),
        "mismatch_kl": float(((torch.expm1(d) - d) * copies).sum()),
    }
