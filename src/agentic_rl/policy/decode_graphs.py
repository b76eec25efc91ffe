"""The fast sampler's decode step with static shapes, replayed as CUDA graphs on a GPU.

Why: on a GPU, one decode step of :class:`~agentic_rl.policy.llama_decoder.SlotLlamaDecoder`
is a few hundred small kernels (measured on an H200: 1.0–1.4k tokens/s at 32 rows for both a
135M and a 1.7B model, i.e. bound by launching kernels, not by the GPU). A CUDA graph records
the step's kernels once and replays them with one launch (the technique vLLM and SGLang use
for decoding). A graph replays fixed shapes and fixed memory addresses, so this module
computes the step of B decoding rows (one new token each, in slots ``0 .. B - 1``) as a pure
function of static buffers:

* rows are padded to a bucket size R >= B (1, 2, 4, 8, then multiples of 8, then of 32); a
  padding row writes its key and value into the decoder's **scratch slot** (never owned by an
  episode) and its output is dropped;
* attention reads each row's slot over a KV length L bucketed to multiples of
  ``kv_block`` positions, masked per row to its own length (a boolean mask computed inside the
  graph from the positions), so one graph serves every length up to L;
* rotary cos/sin come from tables over all positions of the cache (the model's own rotary
  module evaluated once at every position: the same values as computing them per step);
* grouped-query attention reads each KV head once: the queries of a KV head's group are the
  "query length" of one SDPA call (no repeated keys and values).

One graph per (R, L) is captured on first use and kept until the cache is reallocated (it
grows, or :meth:`SlotLlamaDecoder.release_memory`); weight refreshes copy into the same
buffers, so they keep the graphs valid. On the CPU the same function runs eagerly (no
capture): that is how the tests check it against the ragged forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from agentic_rl.policy.llama_decoder import _rms, _rotate_half

__all__ = ["StaticDecode", "row_bucket"]


def row_bucket(rows: int) -> int:
    """The padded row count R of a decode step of ``rows`` rows (>= rows)."""
    for r in (1, 2, 4, 8):
        if rows <= r:
            return r
    if rows <= 64:
        return -(-rows // 8) * 8
    return -(-rows // 32) * 32


@dataclass
class _Graph:
    graph: object  # torch.cuda.CUDAGraph
    logits: torch.Tensor  # [R, V] float32, written by each replay


class StaticDecode:
    """Static-shape decode steps of one :class:`~agentic_rl.policy.llama_decoder.SlotLlamaDecoder`.

    Args:
        decoder: the decoder whose weights, KV cache and scratch slot this reads.
        capture: capture and replay CUDA graphs (CUDA only); False runs the same maths eagerly.
        kv_block: attention length granularity in positions.
    """

    def __init__(self, decoder, capture: bool, kv_block: int = 256) -> None:
        if capture and decoder.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.dec = decoder
        self.capture = capture
        self.kv_block = kv_block
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._inputs: dict[int, torch.Tensor] = {}  # R -> [3, R] int64 (tokens, positions, slots)
        self._tables: tuple[int, torch.Tensor, torch.Tensor] | None = None
        self._pool = None
        self.captures = 0  # graphs captured so far (for benchmarks and tests)

    def invalidate(self) -> None:
        """Forget every graph and the rotary tables (the KV cache was reallocated)."""
        self._graphs.clear()
        self._tables = None

    # ---- the step ------------------------------------------------------------------------------
    def __call__(self, tokens: list[int], past: list[int]) -> torch.Tensor:
        """Decode one new token for each of B rows in slots ``0 .. B - 1``.

        Args:
            tokens: B token ids; past: B cached lengths (the new token's position).

        Returns:
            ``[B, V]`` float32 logits (a fresh tensor).
        """
        dec = self.dec
        n = len(tokens)
        rows = row_bucket(n)
        if rows > dec.num_slots:  # padding rows read slots B .. R - 1: they must exist
            dec.reserve(rows, dec.capacity)
        kv_len = min(dec.capacity, -(-(max(past) + 1) // self.kv_block) * self.kv_block)
        host = torch.zeros((3, rows), dtype=torch.long)
        host[0, :n] = torch.tensor(tokens, dtype=torch.long)
        host[1, :n] = torch.tensor(past, dtype=torch.long)
        host[2, :n] = torch.arange(n)
        host[2, n:] = dec.scratch_slot
        if not self.capture:
            return self.step(host.to(dec.device), kv_len)[:n]
        graph = self._graphs.get((rows, kv_len)) or self._capture(rows, kv_len)
        self._inputs[rows].copy_(host, non_blocking=False)
        graph.graph.replay()
        return graph.logits[:n].clone()

    def _rotary_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        dec = self.dec
        if self._tables is None or self._tables[0] != dec.capacity:
            positions = torch.arange(dec.capacity, device=dec.device)[None]
            probe = dec.base.model.embed_tokens.weight[:1]
            cos, sin = dec.base.model.rotary_emb(probe[None], positions)  # [1, C, d]
            self._tables = (dec.capacity, cos[0].to(dec.dtype), sin[0].to(dec.dtype))
        return self._tables[1], self._tables[2]

    def step(self, inputs: torch.Tensor, kv_len: int) -> torch.Tensor:
        """The decode maths on static buffers (what a graph records).

        Args:
            inputs: ``[3, R]`` int64 on the decoder's device: token ids, positions, and the slot
                each row writes its key and value to (padding rows: the scratch slot).
            kv_len: attention length L (<= the cache capacity).

        Returns:
            ``[R, V]`` float32 logits.
        """
        dec = self.dec
        tok, pos, write_slot = inputs[0], inputs[1], inputs[2]
        rows = tok.shape[0]
        nh, nkv, d, cap = dec.num_heads, dec.num_kv, dec.head_dim, dec.capacity
        group = nh // nkv
        cos_t, sin_t = self._rotary_tables()
        cos, sin = cos_t[pos][:, None], sin_t[pos][:, None]  # [R, 1, d]
        heads = torch.arange(nkv, device=tok.device)
        flat_idx = ((write_slot * nkv)[:, None] + heads[None, :]) * cap + pos[:, None]
        flat_idx = flat_idx.reshape(-1)  # [R * nkv]
        key_pos = torch.arange(kv_len, device=tok.device)
        mask = (key_pos[None, :] <= pos[:, None])[:, None, None, :]  # [R, 1, 1, L]
        h = dec.base.model.embed_tokens(tok)  # [R, hidden]
        for li, layer in enumerate(dec.layers):
            qkv_proj, o_proj, gate_up_proj, down_proj = dec._linears[li]
            qkv = qkv_proj(_rms(layer.input_layernorm, h)).view(rows, nh + 2 * nkv, d)
            qk = qkv[:, : nh + nkv]
            qk = qk * cos + _rotate_half(qk) * sin
            dec.keys[li].view(-1, d).index_copy_(0, flat_idx, qk[:, nh:].reshape(-1, d))
            dec.values[li].view(-1, d).index_copy_(0, flat_idx, qkv[:, nh + nkv :].reshape(-1, d))
            q = qk[:, :nh].reshape(rows, nkv, group, d)  # a KV head's queries as its "length"
            keys = dec.keys[li][:rows, :, :kv_len]
            values = dec.values[li][:rows, :, :kv_len]
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            h = h + o_proj(att.reshape(rows, nh * d)).to(h.dtype)
            gate, up = gate_up_proj(_rms(layer.post_attention_layernorm, h)).chunk(2, dim=-1)
            h = h + down_proj(layer.mlp.act_fn(gate) * up).to(h.dtype)
        return dec._head(_rms(dec.base.model.norm, h)).float()

    # ---- CUDA graphs ---------------------------------------------------------------------------
    def _capture(self, rows: int, kv_len: int) -> _Graph:
        """Record the step for (R, L). Warm-up and capture run with every row writing the scratch
        slot, so they change no episode's KV."""
        dec = self.dec
        inputs = self._inputs.get(rows)
        if inputs is None:
            inputs = self._inputs[rows] = torch.zeros(
                (3, rows), dtype=torch.long, device=dec.device
            )
        inputs.zero_()
        inputs[2].fill_(dec.scratch_slot)
        side = torch.cuda.Stream(dec.device)
        side.wait_stream(torch.cuda.current_stream(dec.device))
        with torch.cuda.stream(side):  # warm-up: lazy initialisation (cuBLAS handles, autotuning)
            for _ in range(2):
                self.step(inputs, kv_len)
        torch.cuda.current_stream(dec.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: the trainer's thread may use the GPU while a producer thread captures
        # (async training, algorithm.max_off_policy_steps >= 1)
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            logits = self.step(inputs, kv_len)
        self.captures += 1
        entry = self._graphs[(rows, kv_len)] = _Graph(graph, logits)
        return entry
