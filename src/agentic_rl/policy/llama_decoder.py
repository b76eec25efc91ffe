"""A Llama-family decoder for sampling: fused weights and a slot KV cache with no per-step copies.

Why: on this 2-core CPU, HF ``generate`` at batch 16 spends its time in ~211 small matmuls per
step and in ``DynamicCache``'s ``torch.cat``, which copies every layer's whole KV on every
token (the cache grows by reallocation). This module runs the same maths as
``transformers``' ``LlamaForCausalLM`` (it calls the model's own RMSNorm, rotary embedding and
``apply_rotary_pos_emb``) with three changes that remove that overhead:

* **Fused projections**: q/k/v in one matmul, gate/up in one matmul (4 matmuls per layer
  instead of 7). The fused matrices are copies, refreshed by :meth:`SlotLlamaDecoder.sync`
  whenever a parameter changed (``Tensor._version`` moves on every in-place update, so an
  optimizer step is detected without the caller's help); LoRA adapters (peft) are merged into
  the copies, the trained model is never modified.
* **Slot KV cache**: keys/values live in preallocated ``[slots, kv_heads, capacity, head_dim]``
  tensors per layer. A row writes its new position in place; attention reads a view. Rows
  decoding together occupy slots ``[0, B)`` so the batch's KV is a view, never a gather; a row
  that pauses (its episode is in an env step) is swapped out of that range with one row copy.
* **Ragged prefill**: rows joining the batch encode only their new tokens, each at its own
  positions on top of its own cached KV, in one forward.

Numerics are float32 like the trainer's; logprobs agree with the HF forward to float error
(the fused matmuls sum in a different order), which tests check. Architectures other than
Llama (``config.model_type == "llama"``, no sliding window) raise :class:`UnsupportedModel`,
and :func:`agentic_rl.policy.fast.make_policy` falls back to :class:`~agentic_rl.policy.hf.HFPolicy`.

Reference for the layer maths: transformers ``models/llama/modeling_llama.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["SlotLlamaDecoder", "UnsupportedModel"]


class UnsupportedModel(ValueError):
    """The model is not a Llama-family causal LM this decoder can run."""


def _base_model(model):
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _effective_weight(module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(weight, bias)`` of a Linear, with active (unmerged) LoRA deltas added."""
    base = module.get_base_layer() if hasattr(module, "get_base_layer") else module
    weight = base.weight
    if hasattr(module, "lora_A") and not getattr(module, "merged", False) and not getattr(module, "disable_adapters", False):
        for name in module.active_adapters:
            if name in module.lora_A:
                if getattr(module, "use_dora", {}).get(name, False):
                    raise UnsupportedModel("DoRA adapters are not supported by the fast decoder")
                weight = weight + module.get_delta_weight(name)
    return weight.detach(), (base.bias.detach() if base.bias is not None else None)


class SlotLlamaDecoder:
    """Fused-weight Llama forward over a slot KV cache (see the module docstring).

    Args:
        model: a ``LlamaForCausalLM`` (optionally wrapped by peft).
        slots: initial number of KV slots (grows on demand).
        capacity: initial positions per slot (grows on demand).

    Raises:
        UnsupportedModel: not a Llama model, or it uses a sliding window.
    """

    def __init__(self, model, slots: int = 8, capacity: int = 512) -> None:
        base = _base_model(model)
        cfg = base.config
        if getattr(cfg, "model_type", None) != "llama" or getattr(cfg, "sliding_window", None):
            raise UnsupportedModel(f"fast decoder supports Llama models, got {getattr(cfg, 'model_type', None)!r}")
        self.model = model
        self.base = base
        self.num_heads = cfg.num_attention_heads
        self.num_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.layers = list(base.model.layers)
        self.dtype = base.model.embed_tokens.weight.dtype
        self.device = base.model.embed_tokens.weight.device
        self._version: tuple[tuple[int, int], ...] | None = None
        self._fused: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]] = []
        shape = (slots, self.num_kv, capacity, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]

    # ---- weights ---------------------------------------------------------------------------
    def _param_version(self) -> tuple[tuple[int, int], ...]:
        return tuple((id(p), p._version) for p in self.model.parameters())

    @torch.no_grad()
    def sync(self, force: bool = False) -> bool:
        """Rebuild the fused weight copies if any parameter changed; returns True if rebuilt."""
        version = self._param_version()
        if not force and version == self._version:
            return False
        fused = []
        for layer in self.layers:
            att, mlp = layer.self_attn, layer.mlp
            qkv = [_effective_weight(m) for m in (att.q_proj, att.k_proj, att.v_proj)]
            gu = [_effective_weight(m) for m in (mlp.gate_proj, mlp.up_proj)]
            w_qkv = torch.cat([w for w, _ in qkv]).contiguous()
            b_qkv = torch.cat([b for _, b in qkv]) if all(b is not None for _, b in qkv) else None
            if b_qkv is None and any(b is not None for _, b in qkv):
                raise UnsupportedModel("q/k/v projections with partial biases")
            w_gu = torch.cat([w for w, _ in gu]).contiguous()
            b_gu = torch.cat([b for _, b in gu]) if all(b is not None for _, b in gu) else None
            fused.append((w_qkv, b_qkv, w_gu, b_gu))
        self._fused = fused
        self._head = _effective_weight(self.base.lm_head)
        self._o = [_effective_weight(layer.self_attn.o_proj) for layer in self.layers]
        self._down = [_effective_weight(layer.mlp.down_proj) for layer in self.layers]
        self._version = version
        return True

    # ---- KV slots --------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def reserve(self, slots: int, capacity: int) -> None:
        """Grow the cache to at least ``slots`` x ``capacity`` (slots double, positions round up to 128), keeping contents."""
        new_s = self.num_slots if slots <= self.num_slots else max(slots, 2 * self.num_slots)
        new_c = self.capacity if capacity <= self.capacity else -(-capacity // 128) * 128
        if (new_s, new_c) == (self.num_slots, self.capacity):
            return
        shape = (new_s, self.num_kv, new_c, self.head_dim)
        for store in (self.keys, self.values):
            for i, old in enumerate(store):
                grown = torch.zeros(shape, dtype=old.dtype, device=old.device)
                grown[: old.shape[0], :, : old.shape[2]] = old
                store[i] = grown

    def swap(self, a: int, b: int, length: int) -> None:
        """Exchange the first ``length`` positions of slots ``a`` and ``b`` in every layer."""
        if a == b or length <= 0:
            return
        for store in (self.keys, self.values):
            for t in store:
                tmp = t[a, :, :length].clone()
                t[a, :, :length] = t[b, :, :length]
                t[b, :, :length] = tmp

    def copy(self, src: int, dst: int, length: int) -> None:
        """Copy the first ``length`` positions of slot ``src`` into slot ``dst``."""
        if src == dst or length <= 0:
            return
        for store in (self.keys, self.values):
            for t in store:
                t[dst, :, :length] = t[src, :, :length]

    def release_memory(self) -> None:
        """Shrink the cache to one slot of one position (frees the KV memory)."""
        shape = (1, self.num_kv, 1, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]

    # ---- forward ---------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, first_slot: int, ids: list[list[int]], past: list[int]) -> torch.Tensor:
        """Encode new tokens of rows in slots ``first_slot .. first_slot + B - 1``.

        Row i appends ``ids[i]`` (>= 1 token) at positions ``past[i] ..`` of its slot, attending
        to its cached positions ``0 .. past[i] - 1`` and causally to its new tokens.

        Args:
            first_slot: slot of row 0; rows occupy consecutive slots.
            ids: B lists of new token ids (ragged).
            past: B cached lengths.

        Returns:
            ``[B, V]`` float logits at each row's last new token.

        Raises:
            ValueError: an empty row, or the rows do not fit the cache (call :meth:`reserve`).
        """
        n = len(ids)
        lens = [len(x) for x in ids]
        if not n or min(lens) < 1:
            raise ValueError("every row needs at least one new token")
        ends = [p + t for p, t in zip(past, lens)]
        if first_slot + n > self.num_slots or max(ends) > self.capacity:
            raise ValueError("rows do not fit the KV cache; call reserve() first")
        width = max(lens)
        dev = self.device
        tok = torch.zeros((n, width), dtype=torch.long)
        for i, row in enumerate(ids):
            tok[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        past_t = torch.tensor(past, dtype=torch.long)
        lens_t = torch.tensor(lens, dtype=torch.long)
        offs = torch.arange(width)
        positions = past_t[:, None] + offs[None, :]  # [B, T]
        valid = offs[None, :] < lens_t[:, None]  # [B, T]
        kv_len = max(ends)
        key_pos = torch.arange(kv_len)
        mask = (key_pos[None, None, :] <= positions[:, :, None]) & valid[:, :, None]  # [B, T, L]
        mask[:, :, 0] |= ~valid  # padded queries attend somewhere (their output is discarded)
        mask = mask[:, None].to(dev)
        rows_b, cols_t = valid.nonzero(as_tuple=True)
        # flat row index of each (token, kv head) in a layer's cache viewed as [S * H * C, d]
        cap, nkv = self.capacity, self.num_kv
        slot_pos = ((rows_b + first_slot) * nkv)[:, None] + torch.arange(nkv)[None, :]  # [N, H]
        flat_idx = (slot_pos * cap + positions[rows_b, cols_t][:, None]).reshape(-1).to(dev)
        all_valid = width == 1
        rows_b, cols_t = rows_b.to(dev), cols_t.to(dev)
        positions = positions.to(dev)
        h = self.base.model.embed_tokens(tok.to(dev))
        cos, sin = self.base.model.rotary_emb(h, positions)
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        nh, nkv, d = self.num_heads, self.num_kv, self.head_dim
        sl = slice(first_slot, first_slot + n)
        for li, layer in enumerate(self.layers):
            w_qkv, b_qkv, w_gu, b_gu = self._fused[li]
            x = layer.input_layernorm(h)
            qkv = F.linear(x, w_qkv, b_qkv)
            q, k, v = qkv.split((nh * d, nkv * d, nkv * d), dim=-1)
            q = q.view(n, width, nh, d).transpose(1, 2)
            k = k.view(n, width, nkv, d).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            v = v.view(n, width, nkv, d)
            kt = k.transpose(1, 2)  # [B, T, H, d]
            if all_valid:
                k_new, v_new = kt[:, 0], v[:, 0]
            else:
                k_new, v_new = kt[rows_b, cols_t], v[rows_b, cols_t]
            self.keys[li].view(-1, d).index_copy_(0, flat_idx, k_new.reshape(-1, d))
            self.values[li].view(-1, d).index_copy_(0, flat_idx, v_new.reshape(-1, d))
            att = F.scaled_dot_product_attention(
                q, self.keys[li][sl, :, :kv_len], self.values[li][sl, :, :kv_len], attn_mask=mask, enable_gqa=True
            )
            w_o, b_o = self._o[li]
            h = h + F.linear(att.transpose(1, 2).reshape(n, width, nh * d), w_o, b_o)
            x = layer.post_attention_layernorm(h)
            gate, up = F.linear(x, w_gu, b_gu).chunk(2, dim=-1)
            w_d, b_d = self._down[li]
            h = h + F.linear(layer.mlp.act_fn(gate) * up, w_d, b_d)
        last = h[torch.arange(n, device=dev), (lens_t - 1).to(dev)]
        last = self.base.model.norm(last)
        w_h, b_h = self._head
        return F.linear(last, w_h, b_h).float()
