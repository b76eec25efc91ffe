"""HF transformers policy: batched sampling with KV caches reused across turns, exact logprobs.

One decode loop serves every live episode of a rollout step. Three things keep it from
re-encoding what it has already seen:

* **Per-episode KV cache across turns.** When a request carries a ``cache_key`` and the ids
  cached under that key are a prefix of its new context (the previous turn's context and
  sampled tokens), only the new tokens (the last sampled token, the tool result, the next
  header) are encoded. A key not requested in a call is evicted; a context that does not
  extend its cached ids is encoded from scratch, so a stale cache can never be used.
* **Shared prefix.** Rows without a cache that start with the same tokens (the system prompt
  and tool schemas) encode that prefix once and share its KV.
* **Finished rows leave the batch** as soon as they sample the end-of-turn token.

Rows are laid out as ``[left padding][past KV][left padding][new tokens]`` with attention mask
0 on padding and explicit position ids, so every row sees exactly its own context at positions
0..len − 1; cached KV is stored compacted (padding removed), which is exact because rotary
position embeddings are applied before caching. The log-probability recorded for each sampled
token is log-softmax(logits / T) of the distribution it was drawn from, in float32; draws
follow :mod:`agentic_rl.policy.sampling` (per-request seeds when given).

This is the simple, architecture-agnostic path; :class:`~agentic_rl.policy.fast.FastPolicy`
is the fast one for Llama models and is tested against this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.policy.sampling import RowSampler, sample_tokens


@dataclass
class _RowKV:
    """Compacted KV of one episode: per layer keys/values [heads, L, head_dim], and the L ids."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    ids: list[int]


class HFPolicy:
    """Sample from a HF causal LM (optionally wrapped by peft).

    Args:
        model: a ``PreTrainedModel`` (or ``PeftModel``) with a causal LM head.
        eos_token_id: id that ends a turn (``<|im_end|>`` for ChatML).
        pad_token_id: id used for padding (masked out, never attended to).
        generator: torch RNG for sampling (reproducible rollouts); None uses the global RNG.
        min_shared_prefix: encode a prefix common to the uncached contexts once when it is at
            least this many tokens.
        reuse_cache: keep per-episode KV caches across turns (see the module docstring).
    """

    def __init__(
        self,
        model,
        eos_token_id: int,
        pad_token_id: int,
        generator: torch.Generator | None = None,
        min_shared_prefix: int = 16,
        reuse_cache: bool = True,
    ):
        self.model = model
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.generator = generator
        self.min_shared_prefix = min_shared_prefix
        self.reuse_cache = reuse_cache
        self._cache: dict[str, _RowKV] = {}

    def clear_cache(self) -> None:
        """Forget every per-episode KV cache (call after the weights change)."""
        self._cache.clear()

    @torch.no_grad()
    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Sample a continuation for every request in one batch.

        Raises:
            ValueError: an empty context or ``max_new_tokens < 1``.
        """
        if not requests:
            return []
        for r in requests:
            if not r.context_ids or r.max_new_tokens < 1:
                raise ValueError("each request needs a non-empty context and max_new_tokens >= 1")
        was_training = self.model.training
        self.model.eval()
        try:
            return self._generate(requests, sampling)
        finally:
            if was_training:
                self.model.train()

    def _pasts(
        self, contexts: list[list[int]], keys: list[str | None], device
    ) -> list[_RowKV | None]:
        """The reusable past KV of each row: its own cache, or a shared prefix, or None."""
        pasts: list[_RowKV | None] = []
        for ctx, key in zip(contexts, keys):
            cached = self._cache.get(key) if key is not None and self.reuse_cache else None
            if (
                cached is not None
                and len(cached.ids) < len(ctx)
                and ctx[: len(cached.ids)] == cached.ids
            ):
                pasts.append(cached)
            else:
                pasts.append(None)
        self._cache = {}  # unrequested keys are evicted; requested ones are re-stored after decoding
        fresh = [i for i, p in enumerate(pasts) if p is None]
        if len(fresh) > 1:
            shared = _common_prefix_len([contexts[i] for i in fresh])
            shared = min(shared, min(len(contexts[i]) for i in fresh) - 1)
            if shared >= self.min_shared_prefix:
                prefix = contexts[fresh[0]][:shared]
                row = self._encode_prefix(prefix, device)
                for i in fresh:
                    pasts[i] = row
        return pasts

    def _encode_prefix(self, prefix: list[int], device) -> _RowKV:
        from transformers import DynamicCache

        cache = DynamicCache()
        self.model(
            input_ids=torch.tensor([prefix], device=device),
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return _RowKV(
            [layer.keys[0] for layer in cache.layers],
            [layer.values[0] for layer in cache.layers],
            list(prefix),
        )

    def _prefill(self, contexts: list[list[int]], pasts: list[_RowKV | None], device):
        """Build the batch cache from the pasts and encode every row's new tokens in one forward.

        Returns:
            ``(cache, attention_mask [n, W], next position [n], last logits [n, V])``.
        """
        from transformers import DynamicCache

        n = len(contexts)
        past_lens = [len(p.ids) if p else 0 for p in pasts]
        width_p = max(past_lens)
        news = [ctx[plen:] for ctx, plen in zip(contexts, past_lens)]
        width_s = max(len(x) for x in news)
        cache = DynamicCache()
        if width_p:
            ref = next(p for p in pasts if p)
            for layer in range(len(ref.keys)):
                h, _, d = ref.keys[layer].shape
                k = ref.keys[layer].new_zeros((n, h, width_p, d))
                v = ref.values[layer].new_zeros((n, h, width_p, d))
                for i, p in enumerate(pasts):
                    if p:
                        k[i, :, width_p - past_lens[i] :] = p.keys[layer]
                        v[i, :, width_p - past_lens[i] :] = p.values[layer]
                cache.update(k, v, layer)
        mask = torch.zeros((n, width_p + width_s), dtype=torch.long)
        ids = torch.full((n, width_s), self.pad_token_id, dtype=torch.long)
        positions = torch.zeros((n, width_s), dtype=torch.long)
        for i, (plen, new) in enumerate(zip(past_lens, news)):
            mask[i, width_p - plen : width_p] = 1
            mask[i, width_p + width_s - len(new) :] = 1
            ids[i, width_s - len(new) :] = torch.tensor(new)
            positions[i, width_s - len(new) :] = torch.arange(plen, plen + len(new))
        mask, ids, positions = mask.to(device), ids.to(device), positions.to(device)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        next_pos = torch.tensor([len(c) for c in contexts], device=device)
        return cache, mask, next_pos, out.logits[:, -1, :]

    def _store(
        self, key: str | None, cache, row: int, mask_row: torch.Tensor, ids: list[int]
    ) -> None:
        """Keep the compacted KV of one batch row (its cached ids are ``ids``)."""
        if key is None or not self.reuse_cache:
            return
        keep = mask_row.nonzero().squeeze(-1)
        if len(keep) != len(ids):
            raise AssertionError(f"KV length {len(keep)} != cached ids {len(ids)}")
        keys = [layer.keys[row].index_select(1, keep) for layer in cache.layers]
        values = [layer.values[row].index_select(1, keep) for layer in cache.layers]
        self._cache[key] = _RowKV(keys, values, ids)

    def _generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        device = next(self.model.parameters()).device
        contexts = [list(r.context_ids) for r in requests]
        keys = [r.cache_key for r in requests]
        n = len(requests)
        cache, mask, next_pos, logits = self._prefill(
            contexts, self._pasts(contexts, keys, device), device
        )
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        finished = [False] * n
        alive = list(range(n))  # original index of each batch row
        samplers = [RowSampler(r.sample_seed) for r in requests]
        while True:
            chosen_ids, chosen_lps = sample_tokens(
                logits, sampling, [samplers[o] for o in alive], self.generator
            )
            chosen = torch.tensor(chosen_ids, device=device)
            keep = []
            for row, (orig, tok, lp) in enumerate(zip(alive, chosen_ids, chosen_lps)):
                tokens[orig].append(tok)
                logps[orig].append(lp)
                if tok == self.eos_token_id:
                    finished[orig] = True
                elif len(tokens[orig]) < requests[orig].max_new_tokens:
                    keep.append(row)
                    continue
                # this row is done: its cache holds the context and all but the last sampled token
                self._store(keys[orig], cache, row, mask[row], contexts[orig] + tokens[orig][:-1])
            if not keep:
                break
            if len(keep) < len(alive):
                sel = torch.tensor(keep, device=device)
                cache.batch_select_indices(sel)
                alive = [alive[r] for r in keep]
                chosen, next_pos, mask = chosen[sel], next_pos[sel], mask[sel]
            mask = torch.cat(
                [mask, torch.ones((len(keep), 1), dtype=mask.dtype, device=device)], dim=1
            )
            out = self.model(
                input_ids=chosen[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                cache=cache,
                use_cache=True,
            )
            next_pos = next_pos + 1
            logits = out.logits[:, -1, :]
        return [Generation(tuple(t), tuple(lp), f) for t, lp, f in zip(tokens, logps, finished)]


def _common_prefix_len(contexts: list[list[int]]) -> int:
    first = contexts[0]
    n = min(len(c) for c in contexts)
    for i in range(n):
        tok = first[i]
        if any(c[i] != tok for c in contexts):
            return i
    return n
