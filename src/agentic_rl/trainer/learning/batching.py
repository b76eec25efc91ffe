"""How an update cuts its batch: micro-batches, exact copies, per-token values of a packed batch.

:func:`micro_batches` bounds each forward/backward's rows and padded tokens (memory only, the
gradient does not change); :func:`deduplicate` finds rows that are exact copies (trained once
with their summed loss weight); :func:`per_token` and :func:`dense` move per-trajectory numbers
(an advantage, a token-aligned list) to and from the flat [N] trained tokens of a
:class:`~agentic_rl.trainer.learning.scoring.PackedBatch`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from agentic_rl.trainer.learning.scoring import PackedBatch
from agentic_rl.types import Trajectory

#: one advantage per trajectory, or one per token of its stream (length T, read at trained tokens)
Advantage = float | Sequence[float]


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


def per_token(values: Sequence[Advantage], idx: Sequence[int], batch: PackedBatch) -> Tensor:
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


def dense(flat: Tensor, batch: PackedBatch) -> Tensor:
    """Scatter [N] flat trained-token values into [B, T-1] (0 elsewhere)."""
    out = torch.zeros(batch.target_mask.shape, dtype=torch.float64, device=flat.device)
    out[batch.target_mask] = flat.detach().double()
    return out


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


def collapse_copies(trajectories, advantages, seq_weights: Tensor, *, enabled: bool):
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


def token_rows(flat: Tensor, batch: PackedBatch, lengths: Sequence[int]) -> list[list[float]]:
    """The [N] trained-token values ``flat`` of a packed batch as one token-aligned list per row.

    Row r (its trajectory has ``lengths[r]`` = T tokens) becomes ``[0.0] + dense_row[: T - 1]``:
    the value of the token at position t sits at index t (position 0 is never trained), 0 at
    untrained tokens.
    """
    rows = dense(flat, batch).cpu()
    return [[0.0] + rows[r].tolist()[: n - 1] for r, n in enumerate(lengths)]
