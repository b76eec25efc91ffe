"""HF transformers policy: batched sampling with a KV cache, recording exact logprobs.

One decode loop serves every live episode of a rollout step: contexts are left-padded into one
batch, prefilled once, then decoded token by token with a ``DynamicCache``. Rows that sampled
the end-of-turn token leave the batch (``batch_select_indices``), so finished episodes cost
nothing. The log-probability recorded for each sampled token is log-softmax(logits / T) of
the distribution it was drawn from, in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams


class HFPolicy:
    """Sample from a HF causal LM (optionally wrapped by peft).

    Args:
        model: a ``PreTrainedModel`` (or ``PeftModel``) with a causal LM head.
        eos_token_id: id that ends a turn (``<|im_end|>`` for ChatML).
        pad_token_id: id used for left padding (masked out, never attended to).
        generator: torch RNG for sampling (reproducible rollouts); None uses the global RNG.
    """

    def __init__(self, model, eos_token_id: int, pad_token_id: int, generator: torch.Generator | None = None):
        self.model = model
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.generator = generator

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        """Sample a continuation for every request in one batch.

        Raises:
            ValueError: an empty context or ``max_new_tokens < 1``.
        """
        if not requests:
            return []
        for r in requests:
            if not r.context_ids or r.max_new_tokens < 1:
                raise ValueError("each request needs a non-empty context and max_new_tokens >= 1")
        from transformers import DynamicCache

        was_training = self.model.training
        self.model.eval()
        try:
            device = next(self.model.parameters()).device
            n = len(requests)
            width = max(len(r.context_ids) for r in requests)
            ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((n, width), dtype=torch.long)
            for i, r in enumerate(requests):
                ids[i, width - len(r.context_ids) :] = torch.tensor(list(r.context_ids))
                mask[i, width - len(r.context_ids) :] = 1
            ids, mask = ids.to(device), mask.to(device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            cache = DynamicCache()
            out = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1
            )
            tokens: list[list[int]] = [[] for _ in range(n)]
            logps: list[list[float]] = [[] for _ in range(n)]
            finished = [False] * n
            limits = [r.max_new_tokens for r in requests]
            alive = torch.arange(n)  # original row of each batch row
            next_pos = positions[:, -1] + 1
            logits = out.logits[:, -1, :]
            while True:
                logprobs = torch.log_softmax(logits.float() / sampling.temperature, dim=-1)
                if sampling.greedy:
                    chosen = logprobs.argmax(dim=-1)
                else:
                    chosen = torch.multinomial(logprobs.exp(), 1, generator=self.generator).squeeze(-1)
                chosen_lp = logprobs.gather(-1, chosen[:, None]).squeeze(-1)
                keep = []
                for row, (orig, tok, lp) in enumerate(zip(alive.tolist(), chosen.tolist(), chosen_lp.tolist())):
                    tokens[orig].append(tok)
                    logps[orig].append(lp)
                    if tok == self.eos_token_id:
                        finished[orig] = True
                    elif len(tokens[orig]) < limits[orig]:
                        keep.append(row)
                if not keep:
                    break
                if len(keep) < len(alive):
                    sel = torch.tensor(keep, device=device)
                    cache.batch_select_indices(sel)
                    alive, chosen, next_pos, mask = alive[keep], chosen[sel], next_pos[sel], mask[sel]
                mask = torch.cat([mask, torch.ones((len(keep), 1), dtype=mask.dtype, device=device)], dim=1)
                out = self.model(
                    input_ids=chosen[:, None],
                    attention_mask=mask,
                    position_ids=next_pos[:, None],
                    past_key_values=cache,
                    use_cache=True,
                )
                next_pos = next_pos + 1
                logits = out.logits[:, -1, :]
            return [Generation(tuple(t), tuple(lp), f) for t, lp, f in zip(tokens, logps, finished)]
        finally:
            if was_training:
                self.model.train()
