"""Score stored token streams with the trainer's model: per-token logprobs and entropy.

Trajectories are right-padded into a micro-batch of shape [B, T]. The token at position t is
predicted by the hidden state at t − 1, so the targets are ``ids[:, 1:]`` and the trained
positions are ``loss_mask[:, 1:] == 1``. The LM head (49,152 × 576 for SmolLM2, the largest
single matmul) is applied only at trained positions, so neither its compute nor a full
[B, T, V] logits tensor is paid for prompt, tool and environment tokens.

Segments. A trajectory whose context was rebuilt during the rollout (``segment_starts``, see
:mod:`agentic_rl.rollout.context`) is several sequences the policy was fed from scratch. The
model then reads one row per *segment* (:class:`SegmentRows`), so each sampled token is scored
conditioned on exactly the prefix it was sampled from. The trained tokens come out in the same
row-major order as in the trajectory layout (segments of a trajectory are consecutive rows and
a segment's first token is never trained), so everything indexed by the trajectory layout
(``target_mask``, ``rows``, advantages, GAE) is unchanged. A batch without rebuilt contexts
is packed and scored exactly as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from agentic_rl.algorithms import entropy_from_logits, token_logprobs_from_logits
from agentic_rl.types import Trajectory


@dataclass(frozen=True)
class PackedBatch:
    """A right-padded micro-batch.

    Attributes:
        input_ids: [B, T] token ids (pad = 0, masked out by ``attention_mask``).
        attention_mask: [B, T] 1 for real tokens.
        target_mask: [B, T-1] bool, True where ``input_ids[:, 1:]`` is a trained (sampled) token.
        old_logprobs: [N] logprobs recorded at sampling for the N trained tokens, row-major.
        rows: [N] index of the trajectory (0..B-1) of each trained token.
        segments: what the model reads when some trajectory has several segments (None: the
            model reads ``input_ids`` itself).
    """

    input_ids: Tensor
    attention_mask: Tensor
    target_mask: Tensor
    old_logprobs: Tensor
    rows: Tensor
    segments: SegmentRows | None = None

    @property
    def num_tokens(self) -> int:
        """N, the number of trained tokens."""
        return int(self.target_mask.sum())


@dataclass(frozen=True)
class SegmentRows:
    """The model's input when segments are scored as their own sequences: one row per segment.

    Attributes:
        input_ids: [S, W] token ids of the S segments of the batch, a trajectory's segments in
            order and trajectories in batch order (pad = 0); W = the longest segment.
        attention_mask: [S, W] 1 for real tokens.
        target_mask: [S, W-1] bool, True where ``input_ids[:, 1:]`` is trained; its True
            entries, row-major, are the trained tokens of the trajectory layout in the same order.
    """

    input_ids: Tensor
    attention_mask: Tensor
    target_mask: Tensor


def _check_segments(t: Trajectory) -> None:
    starts, n = t.segment_starts, len(t.token_ids)
    if (
        not starts
        or starts[0] != 0
        or any(b <= a for a, b in zip(starts, starts[1:]))
        or (n and starts[-1] >= n)
    ):
        raise ValueError(
            f"trajectory {t.trajectory_id}: segment_starts {starts} must ascend from 0 within "
            f"its {n} tokens"
        )
    if any(t.loss_mask[s] for s in starts[1:]):
        raise ValueError(
            f"trajectory {t.trajectory_id}: a segment starts with a sampled token (loss mask 1); "
            "a segment must start with its prompt"
        )


def _segment_rows(trajectories: Sequence[Trajectory], target_mask: Tensor) -> SegmentRows:
    spans = [(t, a, b) for t in trajectories for a, b in t.segments]
    width = max(b - a for _, a, b in spans)
    ids = torch.zeros((len(spans), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for r, (t, a, b) in enumerate(spans):
        ids[r, : b - a] = torch.tensor(t.token_ids[a:b])
        attn[r, : b - a] = 1
        mask[r, : b - a] = torch.tensor(t.loss_mask[a:b], dtype=torch.bool)
    seg_target = mask[:, 1:]
    if int(seg_target.sum()) != int(target_mask.sum()):  # guaranteed by _check_segments
        raise AssertionError("segment rows lost or gained trained tokens")
    return SegmentRows(ids, attn, seg_target)


def pack(trajectories: Sequence[Trajectory], device: torch.device | str = "cpu") -> PackedBatch:
    """Right-pad the exact stored token streams of ``trajectories`` into one batch.

    When any trajectory has several segments, ``segments`` holds one row per segment for the
    model to read (module docstring); otherwise it is None and the batch is as before.

    Raises:
        ValueError: empty input, a trajectory whose token fields differ in length, or whose
            ``segment_starts`` do not ascend from 0 within its tokens or point at a sampled token.
    """
    if not trajectories:
        raise ValueError("pack() needs at least one trajectory")
    width = max(len(t.token_ids) for t in trajectories)
    ids = torch.zeros((len(trajectories), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    old = torch.zeros((len(trajectories), width), dtype=torch.float32)
    for i, t in enumerate(trajectories):
        n = len(t.token_ids)
        if not n == len(t.loss_mask) == len(t.logprobs):
            raise ValueError(
                f"trajectory {t.trajectory_id}: token_ids, loss_mask and logprobs differ in length"
            )
        ids[i, :n] = torch.tensor(t.token_ids)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(t.loss_mask, dtype=torch.bool)
        old[i, :n] = torch.tensor(t.logprobs)
        _check_segments(t)
    target_mask = mask[:, 1:]
    rows = torch.arange(len(trajectories))[:, None].expand_as(target_mask)[target_mask]
    segments = None
    if any(len(t.segment_starts) > 1 for t in trajectories):
        seg = _segment_rows(trajectories, target_mask)
        segments = SegmentRows(
            seg.input_ids.to(device), seg.attention_mask.to(device), seg.target_mask.to(device)
        )
    return PackedBatch(
        ids.to(device),
        attn.to(device),
        target_mask.to(device),
        old[:, 1:][target_mask].to(device),
        rows.to(device),
        segments,
    )


def forward_context(model, precision: str) -> contextlib.AbstractContextManager:
    """The context of the update's forward passes: bf16 autocast on ``model``'s device for
    ``bf16-mixed`` (float32 master weights; :mod:`agentic_rl.policy.device`), else a no-op.
    :func:`score` runs the LM head in the weights' dtype either way."""
    if precision != "bf16-mixed":
        return contextlib.nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16)


def _decoder_and_head(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder(), base.get_output_embeddings()


def _shared_prefix_len(ids: Tensor, attn: Tensor) -> int:
    """Length of the token prefix common to every row (each row keeps at least one own token)."""
    if ids.shape[0] < 2:
        return 0
    lengths = attn.sum(-1)
    same = (ids == ids[:1]).all(dim=0) & (attn == 1).all(dim=0)
    n = int(same.long().cumprod(0).sum())
    return max(0, min(n, int(lengths.min()) - 1))


_ENTROPY_CHUNK = (
    256  # rows per entropy pass: measured at 2,048 tokens, 2.0 GB -> 0.26 GB of transient peak
)


def score(
    model,
    batch: PackedBatch,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    min_shared_prefix: int = 16,
) -> tuple[Tensor, Tensor | None]:
    """Per-token logprobs (and optionally entropy) of the trained tokens of ``batch``.

    A prefix shared by every row (the system prompt and tool schemas) is encoded once and its
    KV cache expanded to the batch, inside the autograd graph: the result and the gradients are
    those of encoding every row in full (exact, not an approximation), at a fraction of the cost.
    With activation (gradient) checkpointing on, HF disables the KV cache in training, so every
    row is then encoded in full.

    With ``batch.segments`` set, the model reads the segment rows instead of the trajectory
    rows (module docstring); the result is in the same order either way.

    Returns:
        ``(logprobs [N], entropy [N] or None)`` in float32, N = ``batch.num_tokens``, at
        temperature T: log-softmax(logits / T)[target]. Gradients flow when grad is enabled.
    """
    decoder, head = _decoder_and_head(model)
    seq = batch.segments if batch.segments is not None else batch
    input_ids, attention_mask, target_mask = seq.input_ids, seq.attention_mask, seq.target_mask
    shared = _shared_prefix_len(input_ids, attention_mask)
    # HF turns the KV cache off under activation checkpointing in train mode: no prefix sharing then
    checkpointing = bool(getattr(decoder, "gradient_checkpointing", False)) and decoder.training
    if shared >= min_shared_prefix and not checkpointing:
        from transformers import DynamicCache

        b = input_ids.shape[0]
        cache = DynamicCache()
        prefix_hidden = decoder(
            input_ids=input_ids[:1, :shared], cache=cache, use_cache=True
        ).last_hidden_state
        cache.batch_repeat_interleave(b)
        rest_ids = input_ids[:, shared:]
        positions = torch.arange(shared, input_ids.shape[1], device=rest_ids.device).expand(b, -1)
        rest_hidden = decoder(
            input_ids=rest_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
        ).last_hidden_state
        hidden = torch.cat([prefix_hidden.expand(b, -1, -1), rest_hidden], dim=1)
    else:
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    selected = hidden[:, :-1][target_mask]  # [N, H]
    targets = input_ids[:, 1:][target_mask]  # [N]
    # the LM head in the weights' dtype even under bf16 autocast (float32 for fp32 and
    # bf16-mixed): bf16 logits carry errors of ~0.1 nat at |logit| ~ 20, and the LM head's
    # precision is the main source of sampler/trainer mismatch (MiniMax-M1, arXiv:2506.13585)
    with torch.autocast(selected.device.type, enabled=False):
        logits = head(selected.to(head.weight.dtype))  # [N, V]
    logprobs = token_logprobs_from_logits(logits[None], targets[None], temperature=temperature)[0]
    entropy = None
    if with_entropy:
        with (
            torch.no_grad()
        ):  # in row chunks: a full-vocabulary pass holds ~5 [N, V] float32 temporaries
            entropy = torch.cat(
                [
                    entropy_from_logits(chunk.float() / temperature)
                    for chunk in logits.detach().split(_ENTROPY_CHUNK)
                ]
            )
    return logprobs, entropy
