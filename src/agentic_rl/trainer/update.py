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
mismatch between the sampler and the trainer; ``train/logprob_diff`` logs that mismatch.
A trajectory whose context was rebuilt during the rollout (several ``segment_starts``) is scored
one segment per sequence (:mod:`agentic_rl.trainer.scoring`), so ρ compares each token under the
prefix it was sampled from; the trajectory's advantage applies to every segment's sampled tokens.

Advantages come in one of three ways: one number per trajectory (broadcast to its tokens),
one number per token (turn-level credit spread over each turn's tokens), or — with a
:class:`CriticSetup` — computed inside the step by GAE(λ) from a value head that reads the
hidden states of this same forward pass (no second pass). With ``kl_mode="reward"`` the KL
estimate is a per-token reward penalty −β·k_t instead: its discounted return is added to the
given advantages, or it enters the token rewards before GAE (InstructGPT-style).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

from agentic_rl.algorithms import (
    discounted_returns,
    gae_advantages,
    get_kl_estimator,
    ppo_clip_loss,
    token_loss_weights,
    value_loss,
)
from agentic_rl.trainer.critic import ValueHead, capture_head_inputs
from agentic_rl.trainer.guards import check_finite
from agentic_rl.trainer.scoring import PackedBatch, pack, score
from agentic_rl.types import Trajectory

#: one advantage per trajectory, or one per token of its stream (length T, read at trained tokens)
Advantage = float | Sequence[float]


@dataclass(frozen=True)
class CriticSetup:
    """PPO's value model for :func:`policy_gradient_update`.

    Attributes:
        head: the value head (reads the policy's hidden states).
        optimizer: the head's own optimizer (stepped once per update).
        token_rewards: per trajectory, a list of length T (its token stream): the reward of each
            step, placed on the last sampled token of the turn that earned it, 0 elsewhere.
        gamma, lam: GAE's γ and λ over the sampled tokens (tool-output spans are skipped).
        clip_eps: clip range of the value loss (None = unclipped).
        max_grad_norm: gradient clipping of the head (0 = off).
        old_values: for a later PPO epoch over the same batch: per trajectory, the token-aligned
            values V_old of the first pass (``values_out``). Then the given ``advantages`` (those
            of the first pass) are used as they are, the value targets are R = A + V_old, and the
            value loss is clipped around V_old; ``token_rewards`` are not read.
    """

    head: ValueHead
    optimizer: torch.optim.Optimizer
    token_rewards: Sequence[Sequence[float]]
    gamma: float = 1.0
    lam: float = 0.95
    clip_eps: float | None = 0.2
    max_grad_norm: float = 1.0
    old_values: Sequence[Sequence[float]] | None = None


def micro_batches(lengths: Sequence[int], max_rows: int, max_tokens: int = 0) -> list[list[int]]:
    """Split sequences into micro-batches for gradient accumulation, shortest first.

    Indices are sorted by length (less padding), then cut greedily so that a micro-batch has at
    most ``max_rows`` sequences and, when ``max_tokens > 0``, at most ``max_tokens`` padded
    tokens (rows × its longest sequence); a sequence longer than ``max_tokens`` goes alone.
    Activation memory of a forward/backward grows with the padded tokens (~1.4 MB per token
    for SmolLM2-135M in float32), so the token cap bounds the update's memory whatever the
    episode lengths; the updates' loss normalisers are global, so the split does not change
    the gradient.

    Args:
        lengths: token count of each sequence.
        max_rows: most sequences per micro-batch (>= 1).
        max_tokens: most padded tokens per micro-batch; 0 = no cap.

    Returns:
        lists of indices into ``lengths``, covering each index once.

    Raises:
        ValueError: ``max_rows`` < 1 or ``max_tokens`` < 0.
    """
    if max_rows < 1 or max_tokens < 0:
        raise ValueError(
            f"micro_batches: max_rows must be >= 1 and max_tokens >= 0, got {max_rows}, {max_tokens}"
        )
    out: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        too_many = len(current) == max_rows or (
            max_tokens > 0 and (len(current) + 1) * lengths[i] > max_tokens
        )
        if current and too_many:
            out.append(current)
            current = []
        current.append(i)
    if current:
        out.append(current)
    return out


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
) -> dict[str, float]:
    """One supervised step: maximise the logprob of the sampled (loss-mask 1) tokens of ``demos``.

    Micro-batches: at most ``micro_batch_size`` demos and ``micro_batch_tokens`` padded tokens
    each (:func:`micro_batches`; 0 = no token cap).

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


def _per_token(values: Sequence[Advantage], idx: Sequence[int], batch: PackedBatch) -> Tensor:
    """[N] flat per-trained-token values of ``values[i]`` (a number or a token-aligned list) for rows ``idx``."""
    b, width = batch.input_ids.shape
    dense = torch.zeros((b, width), dtype=torch.float32)
    for r, i in enumerate(idx):
        v = values[i]
        if isinstance(v, (int, float)):
            dense[r] = float(v)
        else:
            dense[r, : len(v)] = torch.tensor([float(x) for x in v], dtype=torch.float32)
    return dense[:, 1:].to(batch.target_mask.device)[batch.target_mask]


def _dense(flat: Tensor, batch: PackedBatch) -> Tensor:
    """Scatter [N] flat trained-token values into [B, T-1] (0 elsewhere)."""
    out = torch.zeros(batch.target_mask.shape, dtype=torch.float64, device=flat.device)
    out[batch.target_mask] = flat.detach().double()
    return out


def _check_inputs(trajectories, advantages, critic, kl_coef, kl_mode, ref_model) -> None:
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


def _gae(
    critic: CriticSetup,
    values: Tensor,
    rewards: Tensor,
    batch: PackedBatch,
    trajs: Sequence[Trajectory],
) -> tuple[Tensor, Tensor]:
    """GAE advantages and λ-returns [N] over each row's trained tokens, from values [N]."""
    v_dense = _dense(values, batch)
    mask = batch.target_mask
    last = mask.shape[1] - 1 - mask.flip(1).long().argmax(dim=1)  # each row's last trained position
    boot = v_dense[
        torch.arange(mask.shape[0], device=mask.device), last
    ]  # V at the last step (truncation)
    adv, returns = gae_advantages(
        _dense(rewards, batch),
        v_dense,
        mask,
        gamma=critic.gamma,
        lam=critic.lam,
        terminated=[t.terminated for t in trajs],
        bootstrap_values=boot,
    )
    return adv[mask].float().to(values.device), returns[mask].float().to(values.device)


def _advantages(advantages, critic, captured, penalty, idx, batch, mb, gamma: float, total: int):
    """[N] advantages of a micro-batch: given (plus the KL penalty's return), or GAE from the critic.

    Returns ``(advantages [N], values [N] or None, value loss or None, metric sums)``.
    """
    if critic is None:
        adv = _per_token(advantages, idx, batch)
        if penalty is not None:
            adv = (
                adv
                + discounted_returns(_dense(penalty, batch), batch.target_mask, gamma=gamma)[
                    batch.target_mask
                ].float()
            )
        return adv, None, None, {}
    values = critic.head(captured[-1])  # [N], grad to the head only
    if critic.old_values is None:  # first pass: GAE from this pass's values
        rewards = _per_token(critic.token_rewards, idx, batch)
        rewards = rewards if penalty is None else rewards + penalty
        adv, returns = _gae(critic, values.detach(), rewards, batch, mb)
        old = values.detach()
    else:  # later epoch: the first pass's advantages and values
        adv = _per_token(advantages, idx, batch).to(values.device)
        old = _per_token(critic.old_values, idx, batch).to(values.device)
        returns = adv + old
    vloss, vm = value_loss(
        values, old, returns, torch.ones_like(values), clip_eps=critic.clip_eps, normalizer=total
    )
    n = batch.num_tokens
    sums = {
        "value_clip_fraction": vm["value_clip_fraction"] * n,
        "explained_variance": vm["explained_variance"] * n,
        "value_loss": vloss.item(),
        "value_mean": float(values.detach().sum()),
    }
    return adv, values.detach(), vloss, sums


def deduplicate(
    trajectories: Sequence[Trajectory], advantages: Sequence[Advantage]
) -> tuple[list[int], list[int]]:
    """Rows that are exact copies of an earlier one, for training each distinct row once.

    Two rows are copies when their token ids, loss masks, recorded logprobs, segment starts and
    advantages are all equal: every term of the PPO-clip loss (ratio, clip, advantage, KL) and
    its gradient is then the same for both, so training one copy with m times the loss weight
    gives exactly the gradient of training all m. A low-entropy policy samples many identical
    episodes per group (measured on the default run after the warm-up: 2-5 distinct of 8).

    Returns:
        ``(representatives, owner)``: indices of the distinct rows (first occurrences, in
        order), and for every input row the position in ``representatives`` of its copy.
    """
    seen: dict[tuple, int] = {}
    representatives: list[int] = []
    owner: list[int] = []
    for i, (t, a) in enumerate(zip(trajectories, advantages)):
        key = (
            t.token_ids,
            t.loss_mask,
            t.logprobs,
            t.segment_starts,
            float(a) if isinstance(a, (int, float)) else tuple(float(x) for x in a),
        )
        if key not in seen:
            seen[key] = len(representatives)
            representatives.append(i)
        owner.append(seen[key])
    return representatives, owner


def _collapse_copies(trajectories, advantages, seq_weights: Tensor, *, enabled: bool):
    """The distinct rows of :func:`deduplicate` with their summed sequence weights.

    Returns ``(trajectories, advantages, seq_weights [R], owner or None, multiplicity [R])``:
    ``owner`` maps every input row to its distinct row (None when nothing was collapsed) and
    ``multiplicity`` counts the copies of each distinct row.
    """
    if enabled:
        reps, owner = deduplicate(trajectories, advantages)
        if len(reps) < len(trajectories):
            multiplicity = torch.bincount(torch.tensor(owner), minlength=len(reps)).double()
            return (
                [trajectories[i] for i in reps],
                [advantages[i] for i in reps],
                seq_weights[torch.tensor(reps)] * multiplicity,
                owner,
                multiplicity,
            )
    return (
        trajectories,
        advantages,
        seq_weights,
        None,
        torch.ones(len(trajectories), dtype=torch.float64),
    )


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
)


def policy_gradient_update(
    model,
    optimizer,
    trajectories: Sequence[Trajectory],
    advantages: Sequence[Advantage] | None,
    *,
    micro_batch_size: int,
    micro_batch_tokens: int = 0,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    dual_clip: float | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    kl_mode: str = "loss",
    ref_model=None,
    temperature: float = 1.0,
    max_grad_norm: float = 1.0,
    loss_agg: str = "token-mean",
    loss_norm_constant: float | None = None,
    gamma: float = 1.0,
    critic: CriticSetup | None = None,
    advantages_out: list | None = None,
    values_out: list | None = None,
) -> dict[str, float]:
    """One PPO-clip step on ``trajectories``.

    Args:
        trajectories: scored, non-failed trajectories (token streams with old logprobs).
        micro_batch_size, micro_batch_tokens: most trajectories and padded tokens per
            forward/backward (:func:`micro_batches`; 0 tokens = no cap); the gradient does not
            depend on them.
        advantages: per trajectory, one number (broadcast to its trained tokens) or a list of
            length T aligned with its ``token_ids`` (read at trained tokens); None with a critic.
        dual_clip: c > 1 of dual-clip PPO, or None.
        kl_coef: β; needs ``ref_model`` when > 0. kl_estimator: ``k1``/``k2``/``k3``.
        kl_mode: ``"loss"`` (β·agg(k) added to the loss) or ``"reward"`` (−β·k_t per-token reward,
            discounted with ``gamma`` into the advantages, or into the critic's rewards).
        temperature: sampling temperature of the rollouts (logits are divided by it).
        loss_agg, loss_norm_constant: loss aggregation (``token-mean``, ``seq-mean-token-mean``,
            ``seq-mean-token-sum`` with constant C), see ``token_loss_weights``.
        critic: PPO's value head and token rewards; advantages then come from GAE in this pass.
        advantages_out: if a list is given, it is filled with one token-aligned list of length T
            per trajectory: the advantages actually used (0 at untrained tokens).
        values_out: likewise, the value head's V at each trained token (with a critic), to pass
            as ``CriticSetup.old_values`` to a later epoch over the same batch.

    Returns:
        metrics ``train/loss``, ``train/kl`` (mean per token of the chosen estimator; 0 without
        reference), ``train/clip_fraction``, ``train/ratio_mean``, ``train/entropy``,
        ``train/logprob_diff`` (mean |logp_train − logp_sampled|), ``train/advantage_mean``,
        ``train/grad_norm``, ``train/tokens``, ``train/rows_trained`` (distinct rows the model
        read, see :func:`deduplicate`); with a critic also ``train/value_loss``,
        ``train/value_clip_fraction``, ``train/explained_variance``, ``train/value_mean``.

    Raises:
        ValueError: lengths differ, no trained token, ``kl_coef > 0`` without ``ref_model``,
            bad ``kl_mode``/``loss_agg``, or neither advantages nor critic.
    """
    _check_inputs(trajectories, advantages, critic, kl_coef, kl_mode, ref_model)
    counts = torch.tensor([max(sum(t.loss_mask[1:]), 0) for t in trajectories])
    total = int(counts.sum())
    if total == 0:
        raise ValueError("policy_gradient_update: no trained tokens")
    seq_weights = token_loss_weights(counts, loss_agg, norm_constant=loss_norm_constant)
    kl_fn = get_kl_estimator(kl_estimator)
    model.train()
    sums = dict.fromkeys(_SUMS, 0.0)
    sums.update(loss=0.0, advantage=0.0)
    all_trajectories = trajectories
    for out in (advantages_out, values_out):
        if out is not None:
            out[:] = [[0.0] * len(t.token_ids) for t in trajectories]
    # exact copies are trained once with their summed loss weight (a critic reads per-row values: off then)
    trajectories, advantages, seq_weights, owner, multiplicity = _collapse_copies(
        trajectories, advantages, seq_weights, enabled=critic is None
    )
    unique_out = (
        [[0.0] * len(t.token_ids) for t in trajectories] if advantages_out is not None else None
    )
    for idx in micro_batches(
        [len(t.token_ids) for t in trajectories], micro_batch_size, micro_batch_tokens
    ):
        mb = [trajectories[i] for i in idx]
        batch = pack(mb, _device(model))
        n = batch.num_tokens
        if n == 0:
            continue
        with capture_head_inputs(model) if critic is not None else nullcontext() as captured:
            logprobs, entropy = score(model, batch, temperature=temperature, with_entropy=True)
        kl = torch.zeros_like(logprobs)
        if ref_model is not None:
            with torch.no_grad():
                ref_logprobs, _ = score(ref_model, batch, temperature=temperature)
            kl = kl_fn(logprobs, ref_logprobs)
        penalty = -kl_coef * kl.detach() if kl_mode == "reward" and kl_coef > 0 else None
        adv, values, vloss, vm = _advantages(
            advantages, critic, captured, penalty, idx, batch, mb, gamma, total
        )
        for k, v in vm.items():
            sums[k] += v
        weights = seq_weights.to(logprobs.device)[torch.as_tensor(idx, device=logprobs.device)][
            batch.rows
        ]
        copies = multiplicity.to(logprobs.device)[torch.as_tensor(idx, device=logprobs.device)][
            batch.rows
        ].float()
        loss, _ = ppo_clip_loss(
            logprobs,
            batch.old_logprobs,
            adv.to(logprobs.device),
            weights,
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            normalizer=1.0,
            dual_clip=dual_clip,
        )
        if kl_mode == "loss" and kl_coef > 0:
            loss = loss + kl_coef * (kl * weights).sum()
        (loss if vloss is None else loss + vloss).backward()
        _record_advantages(unique_out if advantages_out is not None else None, idx, adv, batch)
        if values is not None:
            _record_advantages(values_out, idx, values, batch)
        sums["loss"] += loss.item()
        _add_token_sums(
            sums,
            logprobs,
            batch.old_logprobs,
            adv,
            kl,
            entropy,
            copies,
            clip_eps_low,
            clip_eps_high,
        )
    if advantages_out is not None:
        advantages_out[:] = [
            list(unique_out[owner[j]] if owner is not None else unique_out[j])
            for j in range(len(all_trajectories))
        ]
    check_finite(sums["loss"], "policy-gradient loss")
    grad_norm = _finish_step(model, optimizer, max_grad_norm)
    out = {"train/loss": sums.pop("loss"), "train/advantage_mean": sums.pop("advantage") / total}
    keys = _SUMS if critic is not None else _SUMS[:5]
    out.update({f"train/{k}": sums[k] / total for k in keys})
    if critic is not None:
        out["train/value_loss"] = sums["value_loss"]  # already normalised by the step's tokens
        _finish_step(critic.head, critic.optimizer, critic.max_grad_norm)
    out.update(
        {
            "train/grad_norm": grad_norm,
            "train/tokens": float(total),
            "train/rows_trained": float(len(trajectories)),
        }
    )
    return out


def _add_token_sums(
    sums: dict,
    logprobs: Tensor,
    old_logprobs: Tensor,
    adv: Tensor,
    kl: Tensor,
    entropy: Tensor,
    copies: Tensor,
    clip_eps_low: float,
    clip_eps_high: float,
) -> None:
    """Add a micro-batch's per-token metric sums (all [N]) to ``sums``, each distinct row counted
    ``copies`` times (so the metrics are those of every input row); clip fraction as in
    :func:`~agentic_rl.algorithms.ppo_clip_loss` (the clipped term active)."""
    ratio = torch.exp(logprobs.detach() - old_logprobs)
    a = adv.to(ratio.device)
    clipped = (
        ((ratio > 1 + clip_eps_high) & (a > 0)) | ((ratio < 1 - clip_eps_low) & (a < 0))
    ).float()
    sums["kl"] += float((kl.detach() * copies).sum())
    sums["clip_fraction"] += float((clipped * copies).sum())
    sums["ratio_mean"] += float((ratio * copies).sum())
    sums["entropy"] += float((entropy * copies).sum())
    sums["logprob_diff"] += float(((logprobs.detach() - old_logprobs).abs() * copies).sum())
    sums["advantage"] += float((a * copies).sum())


def _record_advantages(
    out: list | None, idx: Sequence[int], adv: Tensor, batch: PackedBatch
) -> None:
    if out is None:
        return
    dense = _dense(adv, batch).cpu()
    for r, i in enumerate(idx):
        row = dense[r].tolist()
        out[i] = [0.0] + row[: len(out[i]) - 1]
