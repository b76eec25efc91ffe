"""A Llama-family decoder for sampling: fused weights and a slot KV cache with no per-step copies.

Why: on this 2-core CPU, HF ``generate`` at batch 16 spends its time in ~211 small matmuls per
step and in ``DynamicCache``'s ``torch.cat``, which copies every layer's whole KV on every
token (the cache grows by reallocation). This module runs the same maths as
``transformers``' ``LlamaForCausalLM`` (the model's own rotary embedding module and RMSNorm
weights; RMSNorm as the fused ``F.rms_norm``, q and k rotated in one op) with three changes that
remove that overhead:

* **Fused, prepacked projections**: q/k/v in one matmul, gate/up in one matmul (4 matmuls per
  layer instead of 7), every weight (and the LM head) reordered once into oneDNN's blocked
  layout (``torch.ops.mkldnn._reorder_linear_weight``, the prepacking inductor uses for frozen
  CPU linears). Plain ``F.linear`` calls MKL sgemm, which re-packs the weight matrix on every
  call; at the small row counts of decoding (1–64) that packing costs more than the maths.
  Measured here at 16 rows: 30 layers' matmuls 94.7 ms -> 41.8 ms, LM head 37.6 ms -> 12.7 ms.
  The packed matrices are copies, refreshed by :meth:`SlotLlamaDecoder.sync` whenever a
  parameter changed (``Tensor._version`` moves on every in-place update, so an optimizer step
  is detected without the caller's help); LoRA adapters (peft) are merged into the copies, the
  trained model is never modified. Without oneDNN (or off CPU) plain ``F.linear`` is used.
* **Slot KV cache**: keys/values live in preallocated ``[slots, kv_heads, capacity, head_dim]``
  tensors per layer. A row writes its new position in place; attention reads a view. Rows
  decoding together occupy slots ``[0, B)`` so the batch's KV is a view, never a gather; a row
  that pauses (its episode is in an env step) is swapped out of that range with one row copy.
* **Packed ragged forward**: rows joining the batch encode only their new tokens, each at its
  own positions on top of its own cached KV, in the same forward as the rows that are decoding
  (vLLM's chunked prefill mixed with decode; Sarathi-Serve, Agrawal et al. 2024): the matmuls
  run over the packed tokens of all rows, so a row coming back from an env step does not cost
  a second pass over the weights.

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


def _mkldnn_linear_works(dtype: torch.dtype = torch.float32) -> bool:
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(4, 3, dtype=dtype), 16)
        out = torch.ops.mkldnn._linear_pointwise(
            torch.ones(2, 3, dtype=dtype), w, None, "none", [], ""
        )
        return bool(torch.allclose(out.float(), torch.full((2, 4), 3.0)))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


class _Linear:
    """``y = x W^T + b`` in ``dtype`` (the input is cast to it), with W prepacked for oneDNN
    (CPU float32 or bfloat16) or kept for ``F.linear``."""

    __slots__ = ("weight", "bias", "packed", "dtype")

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        pack: bool,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.dtype = dtype
        self.packed = (
            pack and weight.device.type == "cpu" and dtype in (torch.float32, torch.bfloat16)
        )
        # a copy, never the model's parameter itself: load_() writes into it
        weight = weight.to(dtype, copy=not self.packed)
        self.weight = (
            torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 16)
            if self.packed
            else weight.contiguous()
        )
        self.bias = bias.to(dtype, copy=True) if bias is not None else None

    def load_(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """Copy new values into this unpacked layer's buffers (same addresses: CUDA graphs that
        read them stay valid)."""
        if self.packed:
            raise ValueError("a prepacked oneDNN weight cannot be reloaded in place")
        self.weight.copy_(weight)
        if bias is not None:
            self.bias.copy_(bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def _base_model(model):
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Llama's rotary helper: ``[-x2, x1]`` of the two halves of the last dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rms(norm, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm as one fused op (``F.rms_norm``; bit-equal to HF's float32 RMSNorm)."""
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)


def _cat_biases(biases: list[torch.Tensor | None]) -> torch.Tensor | None:
    if all(b is None for b in biases):
        return None
    if any(b is None for b in biases):
        raise UnsupportedModel("fused projections with partial biases")
    return torch.cat(biases)


def _effective_weight(module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(weight, bias)`` of a Linear, with active (unmerged) LoRA deltas added."""
    base = module.get_base_layer() if hasattr(module, "get_base_layer") else module
    weight = base.weight
    if (
        hasattr(module, "lora_A")
        and not getattr(module, "merged", False)
        and not getattr(module, "disable_adapters", False)
    ):
        for name in module.active_adapters:
            if name in module.lora_A:
                if getattr(module, "use_dora", {}).get(name, False):
                    raise UnsupportedModel("DoRA adapters are not supported by the fast decoder")
                weight = weight + module.get_delta_weight(name)
    return weight.detach(), (base.bias.detach() if base.bias is not None else None)


def _layer_weights(layer) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The fused ``(weight, bias)`` pairs of one decoder layer: qkv, o, gate_up, down."""
    att, mlp = layer.self_attn, layer.mlp
    qkv = [_effective_weight(m) for m in (att.q_proj, att.k_proj, att.v_proj)]
    gu = [_effective_weight(m) for m in (mlp.gate_proj, mlp.up_proj)]
    return [
        (torch.cat([w for w, _ in qkv]), _cat_biases([b for _, b in qkv])),
        _effective_weight(att.o_proj),
        (torch.cat([w for w, _ in gu]), _cat_biases([b for _, b in gu])),
        _effective_weight(mlp.down_proj),
    ]


class SlotLlamaDecoder:
    """Fused-weight Llama forward over a slot KV cache (see the module docstring).

    Args:
        model: a ``LlamaForCausalLM`` (optionally wrapped by peft).
        slots: initial number of KV slots (grows on demand).
        capacity: initial positions per slot (grows on demand).
        dtype: precision of the weight copies, the matmuls, attention and the KV cache (default:
            the model's). ``torch.bfloat16`` halves the bytes read per decode step and uses the
            CPU's bf16 dot products (oneDNN) where it has them; the residual stream, norms, the
            LM head and the logits stay in the model's precision. The logits then differ from the trainer's
            (measured in ``benchmarks/decode_throughput.py``), so the recorded logprobs are a
            behaviour policy's, corrected by the PPO importance ratio.

        static_decode: run decode steps through
            :class:`~agentic_rl.policy.decode_graphs.StaticDecode`: ``"graphs"`` captures them
            as CUDA graphs (CUDA only), ``"eager"`` runs the same static-shape maths without
            capture (tests, dry runs), None keeps every step on the ragged forward.

    The cache holds one slot more than :attr:`num_slots`: the **scratch slot**
    (:attr:`scratch_slot`), where padding rows of a static decode step write.

    Raises:
        UnsupportedModel: not a Llama model, or it uses a sliding window.
        ValueError: ``static_decode = "graphs"`` off CUDA, or an unknown value.
    """

    def __init__(
        self,
        model,
        slots: int = 8,
        capacity: int = 512,
        dtype: torch.dtype | None = None,
        static_decode: str | None = None,
    ) -> None:
        base = _base_model(model)
        cfg = base.config
        if getattr(cfg, "model_type", None) != "llama" or getattr(cfg, "sliding_window", None):
            raise UnsupportedModel(
                f"fast decoder supports Llama models, got {getattr(cfg, 'model_type', None)!r}"
            )
        self.model = model
        self.base = base
        self.num_heads = cfg.num_attention_heads
        self.num_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.layers = list(base.model.layers)
        self.model_dtype = base.model.embed_tokens.weight.dtype
        self.dtype = dtype or self.model_dtype  # weights copies, matmuls, attention, KV cache
        if self.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"unsupported sampler dtype {self.dtype}")
        self.device = base.model.embed_tokens.weight.device
        self._version: tuple[tuple[int, int], ...] | None = None
        self.refresh_parameters()  # the parameters sync() watches
        self._pack = _mkldnn_linear_works(self.dtype)
        self._linears: list[
            tuple[_Linear, _Linear, _Linear, _Linear]
        ] = []  # per layer: qkv, o, gate_up, down
        shape = (slots + 1, self.num_kv, capacity, self.head_dim)  # + the scratch slot
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [
            torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers
        ]
        if static_decode not in (None, "eager", "graphs"):
            raise ValueError(
                f"static_decode must be None, 'eager' or 'graphs', got {static_decode!r}"
            )
        self.static = None
        if static_decode is not None:
            from agentic_rl.policy.decode_graphs import StaticDecode

            self.static = StaticDecode(self, capture=static_decode == "graphs")

    # ---- weights ---------------------------------------------------------------------------
    def refresh_parameters(self) -> None:
        """Re-read the list of the model's parameters that :meth:`sync` watches.

        Listing them walks every module (measured for SmolLM2: 0.6 ms, 3.2 ms under peft), too
        slow for every decode step, so :meth:`sync` checks the list read here.
        :class:`~agentic_rl.policy.fast.DecodeStream` calls this when it opens and
        ``sync(force=True)`` does too; call it after adding or replacing parameters (attaching
        an adapter) while a stream is open.
        """
        self._params = list(self.model.parameters())

    def _param_version(self) -> tuple[tuple[int, int], ...]:
        return tuple((id(p), p._version) for p in self._params)

    @torch.no_grad()
    def sync(self, force: bool = False) -> bool:
        """Rebuild the fused, prepacked weight copies if any parameter changed; returns True if rebuilt.

        A change is seen through the autograd version counters of the parameters listed by
        :meth:`refresh_parameters`, which in-place torch ops bump. Kernels that write weights
        without bumping them (torch's fused optimizers) are invisible: the recipe's optimizer
        bumps them in a step hook (:func:`agentic_rl.trainer.learning.optim.make_optimizer`); other code
        that updates weights that way must call ``sync(force=True)``.
        """
        if force:
            self.refresh_parameters()
        version = self._param_version()
        if not force and version == self._version:
            return False
        if self._linears and not self._pack:
            # unpacked copies (GPU): overwrite them in place, so captured CUDA graphs stay valid
            for linears, layer in zip(self._linears, self.layers):
                for lin, (w, b) in zip(linears, _layer_weights(layer)):
                    lin.load_(w, b)
            self._head.load_(*_effective_weight(self.base.lm_head))
            self._version = version
            return True
        # Stale copies are dropped as their replacements are built: layer by layer, so the memory
        # never holds a second full copy, and each layer's new copies reuse the blocks the previous
        # layer's old ones freed (same sizes). Fresh memory instead costs a page fault per 4 KiB
        # on first touch, measured at 0.2 s of a 0.3 s refresh of SmolLM2's 538 MB.
        self._version, self._head = None, None
        stale, linears = self._linears, []
        for i, layer in enumerate(self.layers):
            linears.append(
                tuple(_Linear(w, b, self._pack, self.dtype) for w, b in _layer_weights(layer))
            )
            if i < len(stale):
                stale[i] = None
        self._linears = linears
        # the LM head in the model's dtype: the logits' precision is the main source of
        # sampler/trainer mismatch (MiniMax-M1, arXiv:2506.13585); the trainer does the same
        self._head = _Linear(*_effective_weight(self.base.lm_head), self._pack, self.model_dtype)
        self._version = version
        return True

    # ---- KV slots --------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        """Slots episodes may own (the scratch slot not counted)."""
        return self.keys[0].shape[0] - 1

    @property
    def scratch_slot(self) -> int:
        """The slot no episode owns, where padding rows of static decode steps write."""
        return self.keys[0].shape[0] - 1

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def reserve(self, slots: int, capacity: int) -> None:
        """Grow the cache to ``slots`` x ``capacity`` (positions: rounded up to 128, plus 128 of headroom),
        keeping contents. Layers are reallocated one at a time, so growing holds one extra layer, not a
        second cache."""
        new_s = max(slots, self.num_slots)
        new_c = self.capacity if capacity <= self.capacity else -(-capacity // 128) * 128 + 128
        if (new_s, new_c) == (self.num_slots, self.capacity):
            return
        shape = (new_s + 1, self.num_kv, new_c, self.head_dim)  # + the scratch slot
        for store in (self.keys, self.values):
            for i, old in enumerate(store):
                grown = torch.zeros(shape, dtype=old.dtype, device=old.device)
                grown[: old.shape[0] - 1, :, : old.shape[2]] = old[:-1]
                store[i] = grown
        if self.static is not None:
            self.static.invalidate()

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
        shape = (2, self.num_kv, 1, self.head_dim)  # one slot and the scratch slot
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [
            torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers
        ]
        if self.static is not None:
            self.static.invalidate()

    # ---- forward ---------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, first_slot: int, ids: list[list[int]], past: list[int]) -> torch.Tensor:
        """Encode new tokens of rows in slots ``first_slot .. first_slot + B - 1``.

        Row i appends ``ids[i]`` (>= 1 token) at positions ``past[i] ..`` of its slot, attending
        to its cached positions ``0 .. past[i] - 1`` and causally to its new tokens. Rows of one
        token (decoding) and rows of many (joining rows' prompts, tool results) go through one
        forward: the projections and the MLP run on the ``N = sum(len(ids[i]))`` packed tokens
        (no padding, the weights are read once for all of them); attention runs per maximal run
        of consecutive rows of the same kind, single-token runs unpadded, multi-token runs padded
        to their longest row.

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
        if not n or min(lens) < 1 or len(past) != n:
            raise ValueError("every row needs at least one new token and a cached length")
        ends = [p + t for p, t in zip(past, lens)]
        if first_slot + n > self.num_slots or max(ends) > self.capacity:
            raise ValueError("rows do not fit the KV cache; call reserve() first")
        if self.static is not None and first_slot == 0:
            # leading one-token rows (the decoding ones): the static step (a CUDA graph replay)
            k = next((i for i, t in enumerate(lens) if t != 1), n)
            if k:
                head = self.static([row[0] for row in ids[:k]], past[:k])
                if k == n:
                    return head
                return torch.cat([head, self._forward(k, ids[k:], past[k:])])
        return self._forward(first_slot, ids, past)

    def _forward(self, first_slot: int, ids: list[list[int]], past: list[int]) -> torch.Tensor:
        """The ragged forward of :meth:`forward` (arguments checked there)."""
        n = len(ids)
        lens = [len(x) for x in ids]
        ends = [p + t for p, t in zip(past, lens)]
        dev = self.device
        cap, nh, nkv, d = self.capacity, self.num_heads, self.num_kv, self.head_dim
        tok = torch.tensor([t for row in ids for t in row], dtype=torch.long)
        lens_t = torch.tensor(lens, dtype=torch.long)
        row_of = torch.repeat_interleave(torch.arange(n), lens_t)  # [N] row of each packed token
        starts = [0] * n
        for i in range(1, n):
            starts[i] = starts[i - 1] + lens[i - 1]
        starts_t = torch.tensor(starts, dtype=torch.long)
        positions = (
            torch.tensor(past, dtype=torch.long)[row_of] + torch.arange(len(tok)) - starts_t[row_of]
        )  # [N]
        # flat row index of each (token, kv head) in a layer's cache viewed as [S * H * C, d]
        slot_pos = ((row_of + first_slot) * nkv)[:, None] + torch.arange(nkv)[None, :]  # [N, H]
        flat_idx = (slot_pos * cap + positions[:, None]).reshape(-1).to(dev)
        runs = self._attention_runs(first_slot, lens, ends, starts)
        h = self.base.model.embed_tokens(tok.to(dev))  # [N, hidden]
        cos, sin = self.base.model.rotary_emb(h[None], positions[None].to(dev))  # [1, N, d]
        cos, sin = (
            cos[0, :, None].to(self.dtype),
            sin[0, :, None].to(self.dtype),
        )  # broadcast over heads
        for li, layer in enumerate(self.layers):
            qkv_proj, o_proj, gate_up_proj, down_proj = self._linears[li]
            qkv = qkv_proj(_rms(layer.input_layernorm, h)).view(
                -1, nh + 2 * nkv, d
            )  # [N, heads, d]
            qk = qkv[:, : nh + nkv]  # rotate q and k heads in one op
            qk = qk * cos + _rotate_half(qk) * sin
            q = qk[:, :nh]
            self.keys[li].view(-1, d).index_copy_(0, flat_idx, qk[:, nh:].reshape(-1, d))
            self.values[li].view(-1, d).index_copy_(0, flat_idx, qkv[:, nh + nkv :].reshape(-1, d))
            h = h + o_proj(self._attend(li, q, runs)).to(h.dtype)
            gate, up = gate_up_proj(_rms(layer.post_attention_layernorm, h)).chunk(2, dim=-1)
            h = h + down_proj(layer.mlp.act_fn(gate) * up).to(h.dtype)
        last = torch.tensor([s + t - 1 for s, t in zip(starts, lens)], device=dev)
        return self._head(_rms(self.base.model.norm, h[last])).float()

    def _attend(self, li: int, q: torch.Tensor, runs: list[tuple]) -> torch.Tensor:
        """Attention of layer ``li``'s packed queries ``q`` ``[N, nh, d]`` over its KV cache, one
        run of :meth:`_attention_runs` at a time; ``[N, nh * d]`` in packed token order."""
        nh, d = self.num_heads, self.head_dim
        outs = []
        for lo, hi, sl, kv_len, valid, mask in runs:
            keys, values = self.keys[li][sl, :, :kv_len], self.values[li][sl, :, :kv_len]
            if valid is None:  # one token per row: [R, nh, 1, d]
                att = F.scaled_dot_product_attention(
                    q[lo:hi, :, None], keys, values, attn_mask=mask, enable_gqa=True
                )
                outs.append(att.reshape(hi - lo, nh * d))
            else:  # padded to the run's longest row: [R, nh, T, d]
                qp = q.new_zeros((*valid.shape, nh, d))
                qp[valid] = q[lo:hi]
                att = F.scaled_dot_product_attention(
                    qp.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True
                )
                outs.append(att.transpose(1, 2)[valid].reshape(hi - lo, nh * d))
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def _attention_runs(
        self, first_slot: int, lens: list[int], ends: list[int], starts: list[int]
    ) -> list[tuple]:
        """Split rows into maximal runs of consecutive rows that are all single-token or all
        multi-token. Per run: ``(lo, hi, slots, kv_len, valid, mask)`` with ``lo:hi`` its packed
        token range, ``slots`` its slice of the cache, ``kv_len`` the longest row end, ``valid``
        ``[R, T]`` (None for a single-token run) and the boolean attention mask ``[R, 1, T, kv_len]``."""
        runs, r0, n = [], 0, len(lens)
        while r0 < n:
            single = lens[r0] == 1
            r1 = r0 + 1
            while r1 < n and (lens[r1] == 1) == single:
                r1 += 1
            kv_len = max(ends[r0:r1])
            key_pos = torch.arange(kv_len)
            run_ends = torch.tensor(ends[r0:r1], dtype=torch.long)
            if single:
                valid = None
                mask = key_pos[None, None, None, :] < run_ends[:, None, None, None]  # [R, 1, 1, L]
            else:
                width = max(lens[r0:r1])
                run_lens = torch.tensor(lens[r0:r1], dtype=torch.long)
                offs = torch.arange(width)
                valid = offs[None, :] < run_lens[:, None]  # [R, T]
                pos = (run_ends - run_lens)[:, None] + offs[None, :]  # [R, T]
                m = (key_pos[None, None, :] <= pos[:, :, None]) & valid[:, :, None]  # [R, T, L]
                m[:, :, 0] |= ~valid  # padded queries attend somewhere (their output is discarded)
                mask = m[:, None]
                valid = valid.to(self.device)
            lo, hi = starts[r0], starts[r1 - 1] + lens[r1 - 1]
            runs.append(
                (
                    lo,
                    hi,
                    slice(first_slot + r0, first_slot + r1),
                    kv_len,
                    valid,
                    mask.to(self.device),
                )
            )
            r0 = r1
        return runs
