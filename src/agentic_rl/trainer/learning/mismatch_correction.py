"""The sampler/trainer mismatch correction of a policy-gradient update (``[loss] tis_cap``,
``mis_low``, ``mis_high``, ``mis_level``; formulas in :mod:`agentic_rl.algorithms.mismatch`).

Without it, the update's PPO ratio is taken against the logprobs μ recorded by the sampler
(``Trajectory.logprobs``). With it (any of the keys on), an RL step first scores its
trajectories with the trainer itself under ``torch.no_grad`` (:func:`old_policy_logprobs`: the
trainer before the step's first optimizer step, π_old), and every optimizer step of the RL step

- takes the PPO ratio ρ = π_θ / π_old against those (so the clip measures the trainer's own
  move, not the sampler's numerics);
- multiplies each token's policy-gradient loss by the TIS weight min(π_old / μ, tis_cap);
- drops (weight 0, in the policy-gradient and the KL term) the tokens, or whole sequences,
  whose π_old / μ lies outside [mis_low, mis_high] (MIS).

This is decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy optimization",
arXiv:2110.00641: a proximal policy for the clip, a behaviour policy for the importance weight)
with Yao et al. 2025's truncation. The loss normaliser is unchanged: a dropped token counts as a
zero, it does not re-weight the others. :func:`mismatch_metrics` logs ``train/mismatch_kl``
(k3 of KL(μ‖π_old)), ``train/tis_capped_fraction`` and ``train/mis_masked_fraction``; they need
π_old, so they are logged only when the correction is on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from agentic_rl.algorithms.mismatch import masked_is, mismatch_kl, truncated_is_weights
from agentic_rl.trainer.learning.batching import dense, micro_batches, per_token, token_rows
from agentic_rl.trainer.learning.scoring import PackedBatch, forward_context, pack, score
from agentic_rl.types import Trajectory

__all__ = [
    "correction_on",
    "correction_terms",
    "mis_bounds",
    "mismatch_metrics",
    "old_policy_logprobs",
    "step_correction",
]


def correction_on(settings) -> bool:
    """Whether ``settings`` (a :class:`~agentic_rl.trainer.learning.update.LossSettings`) turns on TIS or MIS."""
    return settings.tis_cap > 0 or settings.mis_low > 0 or settings.mis_high > 0


def mis_bounds(settings) -> tuple[float, float] | None:
    """MIS's kept range [low, high] (``mis_low`` 0 = no lower bound, ``mis_high`` 0 = no upper
    bound, a huge finite one), or None when MIS is off (both 0)."""
    if settings.mis_low <= 0 and settings.mis_high <= 0:
        return None
    return settings.mis_low, settings.mis_high if settings.mis_high > 0 else 1e300


def old_policy_logprobs(model, trajectories: Sequence[Trajectory], settings) -> list[list[float]]:
    """π_old: the trainer's logprobs of every trajectory's tokens, under ``torch.no_grad``.

    Scored with the update's own path (:func:`~agentic_rl.trainer.learning.scoring.score`, the same
    temperature, train mode, micro-batches of ``settings.micro_batch_size`` rows and
    ``micro_batch_tokens`` padded tokens), so at unchanged weights they equal the update's
    first forward.

    Returns:
        per trajectory a list of length T aligned with its ``token_ids``: logπ_old (nats) at
        trained tokens, 0 elsewhere.
    """
    out: list[list[float]] = [[] for _ in trajectories]
    device = next(model.parameters()).device
    model.train()
    lengths = [len(t.token_ids) for t in trajectories]
    with torch.no_grad():
        for idx in micro_batches(lengths, settings.micro_batch_size, settings.micro_batch_tokens):
            batch = pack([trajectories[i] for i in idx], device)
            if batch.num_tokens == 0:
                rows = [[0.0] * lengths[i] for i in idx]
            else:
                with forward_context(model, settings.precision):
                    logprobs, _ = score(model, batch, temperature=settings.temperature)
                rows = token_rows(logprobs.float(), batch, [lengths[i] for i in idx])
            for i, row in zip(idx, rows):
                out[i] = row
    return out


def correction_terms(
    old_rows: Sequence[Sequence[float]] | None, idx: Sequence[int], batch: PackedBatch, settings
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The ratio's denominator and the correction factors of one micro-batch's N trained tokens.

    Args:
        old_rows: per row of the update, π_old as a token-aligned list (from
            :func:`old_policy_logprobs`); None when the correction is off.
        idx: the update's rows in this micro-batch; batch: their packed tokens.

    Returns:
        ``(old [N], pg_factor [N] or None, keep [N] or None)``: the logprobs the PPO ratio
        divides by (π_old, or the sampler's μ when ``old_rows`` is None), the factor of each
        token's policy-gradient loss (TIS weight × MIS mask; None = 1), and the MIS mask of the
        other per-token terms (None = all kept).
    """
    if old_rows is None:
        return batch.old_logprobs, None, None
    old = per_token(old_rows, idx, batch).to(batch.old_logprobs.device)
    trainer, sampler = dense(old, batch), dense(batch.old_logprobs, batch)
    mask = batch.target_mask
    factor = keep = None
    if settings.tis_cap > 0:
        factor = truncated_is_weights(trainer, sampler, settings.tis_cap)[mask]
    bounds = mis_bounds(settings)
    if bounds is not None:
        keep = masked_is(trainer, sampler, mask, *bounds, level=settings.mis_level)[mask]
        factor = keep if factor is None else factor * keep
    return old, factor, keep


def mismatch_metrics(
    trajectories: Sequence[Trajectory], old_rows: Sequence[Sequence[float]], settings
) -> dict[str, float]:
    """The step's mismatch between the sampler (``Trajectory.logprobs``) and π_old (``old_rows``).

    Returns:
        ``train/mismatch_kl`` (k3 estimate of KL(μ‖π_old) per trained token, nats),
        ``train/tis_capped_fraction`` (trained tokens whose π_old / μ exceeds ``tis_cap``; 0 with
        TIS off), ``train/mis_masked_fraction`` (trained tokens MIS drops; 0 with MIS off).
        Empty when no token is trained.
    """
    width = max((len(t.token_ids) for t in trajectories), default=0)
    if width == 0:
        return {}
    shape = (len(trajectories), width)
    trainer, sampler = torch.zeros(shape), torch.zeros(shape)
    mask = torch.zeros(shape, dtype=torch.bool)
    for r, (t, old) in enumerate(zip(trajectories, old_rows)):
        n = len(t.token_ids)
        trainer[r, :n] = torch.tensor(old, dtype=torch.float32)
        sampler[r, :n] = torch.tensor(t.logprobs, dtype=torch.float32)
        mask[r, 1:n] = torch.tensor(t.loss_mask[1:], dtype=torch.bool)  # position 0 never trains
    total = int(mask.sum())
    if total == 0:
        return {}
    capped = masked = 0.0
    if settings.tis_cap > 0:
        ratio = torch.exp((trainer - sampler).double())
        capped = float(((ratio > settings.tis_cap) & mask).sum()) / total
    bounds = mis_bounds(settings)
    if bounds is not None:
        kept = masked_is(trainer, sampler, mask, *bounds, level=settings.mis_level)
        masked = 1.0 - float(kept.sum()) / total
    return {
        "train/mismatch_kl": float(mismatch_kl(trainer, sampler, mask)),
        "train/tis_capped_fraction": capped,
        "train/mis_masked_fraction": masked,
    }


def step_correction(
    model,
    trajectories: Sequence[Trajectory],
    rows: Sequence[Trajectory],
    owner: Sequence[int] | None,
    old_logprobs: Sequence[Sequence[float]] | None,
    settings,
) -> tuple[list[list[float]] | None, dict[str, float]]:
    """π_old of an update's distinct rows, and its mismatch metrics over the input trajectories.

    Args:
        model: the policy (scores π_old when ``old_logprobs`` is None).
        trajectories: the update's input rows; rows: its distinct rows, ``owner[j]`` the row of
            input j (None: rows are the inputs), as from
            :func:`~agentic_rl.trainer.learning.batching.collapse_copies`.
        old_logprobs: per input trajectory, π_old as a token-aligned list (computed once per RL
            step by the recipe, before its first optimizer step); None computes it here.
        settings: the update's ``LossSettings``.

    Returns:
        ``(row_old, metrics)``: per distinct row its π_old list (None with the correction off)
        and :func:`mismatch_metrics` (empty when off).

    Raises:
        ValueError: ``old_logprobs`` given with the correction off, or not one list of length T
            per trajectory.
    """
    if not correction_on(settings):
        if old_logprobs is not None:
            raise ValueError("old_logprobs given, but loss.tis_cap and loss.mis_* are all off")
        return None, {}
    if old_logprobs is None:
        row_old = old_policy_logprobs(model, rows, settings)
        per_input = row_old if owner is None else [row_old[o] for o in owner]
        return row_old, mismatch_metrics(trajectories, per_input, settings)
    if len(old_logprobs) != len(trajectories) or any(
        len(o) != len(t.token_ids) for o, t in zip(old_logprobs, trajectories)
    ):
        raise ValueError("old_logprobs needs one list of length T (token_ids) per trajectory")
    per_input = [list(o) for o in old_logprobs]
    if owner is None:
        return per_input, mismatch_metrics(trajectories, per_input, settings)
    first: dict[int, int] = {}
    for j, o in enumerate(owner):
        first.setdefault(o, j)
    row_old = [per_input[first[r]] for r in range(len(rows))]
    return row_old, mismatch_metrics(trajectories, per_input, settings)
