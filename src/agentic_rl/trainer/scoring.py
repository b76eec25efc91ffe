"""Score stored token streams with the trainer's model: per-token logprobs and entropy.

Trajectories are right-padded into a micro-batch of shape [B, T]. The token at position t is
predicted by the hidden state at t − 1, so the targets are ``ids[:, 1:]`` and the trained
positions are ``loss_mask[:, 1:] == 1``. The LM head (49,152 × 576 for SmolLM2, the largest
single matmul) is applied only at trained positions, so neither its compute nor a full
[B, T, V] logits tensor is paid for prompt, tool and environment tokens.
"""

from __future__ import annotations

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
    """

    input_ids: Tensor
    attention_mask: Tensor
    target_mask: Tensor
    old_logprobs: Tensor
    rows: Tensor

    @property
    def num_tokens(self) -> int:
        """N, the number of trained tokens."""
        return int(self.target_mask.sum())


def pack(trajectories: Sequence[Trajectory], device: torch.device | str = "cpu") -> PackedBatch:
    """Right-pad the exact stored token streams of ``trajectories`` into one batch.

    Raises:
        ValueError: empty input or a trajectory whose token fields differ in length.
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
            raise ValueError(f"trajectory {t.trajectory_id}: token_ids, loss_mask and logprobs differ in length")
        ids[i, :n] = torch.tensor(t.token_ids)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(t.loss_mask, dtype=torch.bool)
        old[i, :n] = torch.tensor(t.logprobs)
    target_mask = mask[:, 1:]
    rows = torch.arange(len(trajectories))[:, None].expand_as(target_mask)[target_mask]
    return PackedBatch(ids.to(device), attn.to(device), target_mask.to(device), old[:, 1:][target_mask].to(device), rows.to(device))


def _decoder_and_head(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder(), base.get_output_embeddings()


def _shared_prefix_len(batch: PackedBatch) -> int:
    """Length of the token prefix common to every row (each row keeps at least one own token)."""
    ids, attn = batch.input_ids, batch.attention_mask
    if ids.shape[0] < 2:
        return 0
    lengths = attn.sum(-1)
    same = (ids == ids[:1]).all(dim=0) & (attn == 1).all(dim=0)
    n = int(same.long().cumprod(0).sum())
    return max(0, min(n, int(lengths.min()) - 1))


def score(
    model, batch: PackedBatch, *, temperature: float = 1.0, with_entropy: bool = False, min_shared_prefix: int = 16
) -> tuple[Tensor, Tensor | None]:
    """Per-token logprobs (and optionally entropy) of the trained tokens of ``batch``.

    A prefix shared by every row (the system prompt and tool schemas) is encoded once and its
    KV cache expanded to the batch, inside the autograd graph: the result and the gradients are
    those of encoding every row in full (exact, not an approximation), at a fraction of the cost.
    With activation (gradient) checkpointing on, HF disables the KV cache in training, so every
    row is then encoded in full.

    Returns:
        ``(logprobs [N], entropy [N] or None)`` in float32, N = ``batch.num_tokens``, at
        temperature T: log-softmax(logits / T)[target]. Gradients flow when grad is enabled.
    """
    decoder, head = _decoder_and_head(model)
    shared = _shared_prefix_len(batch)
    # HF turns the KV cache off under activation checkpointing in train mode: no prefix sharing then
    checkpointing = bool(getattr(decoder, "gradient_checkpointing", False)) and decoder.training
    if shared >= min_shared_prefix and not checkpointing:
        from transformers import DynamicCache

        b = batch.input_ids.shape[0]
        cache = DynamicCache()
        prefix_hidden = decoder(input_ids=batch.input_ids[:1, :shared], cache=cache, use_cache=True).last_hidden_state
        cache.batch_repeat_interleave(b)
        rest_ids = batch.input_ids[:, shared:]
        positions = torch.arange(shared, batch.input_ids.shape[1], device=rest_ids.device).expand(b, -1)
        rest_hidden = decoder(
            input_ids=rest_ids, attention_mask=batch.attention_mask, position_ids=positions, cache=cache, use_cache=True
        ).last_hidden_state
        hidden = torch.cat([prefix_hidden.expand(b, -1, -1), rest_hidden], dim=1)
    else:
        hidden = decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    selected = hidden[:, :-1][batch.target_mask]  # [N, H]
    targets = batch.input_ids[:, 1:][batch.target_mask]  # [N]
    logits = head(selected)  # [N, V]
    logprobs = token_logprobs_from_logits(logits[None], targets[None], temperature=temperature)[0]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach().float() / temperature)
    return logprobs, entropy
