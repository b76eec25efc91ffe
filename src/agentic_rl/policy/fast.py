"""The fast sampling policy: continuous batching over a slot KV cache.

:class:`FastPolicy` serves the same :class:`~agentic_rl.policy.base.Policy` interface as
:class:`~agentic_rl.policy.hf.HFPolicy` (``generate``, one call per turn) and, in addition, a
**decode stream** that the rollout engine drives token by token::

    with policy.open_stream(sampling) as stream:
        stream.submit(request)          # queued; joins the batch at the next step
        done = stream.step()            # one token for every live row: [(request, Generation)]
        stream.release(cache_key)       # the episode ended: free its KV slot

Rows finish a turn at different times. A finished row leaves the batch at once (its KV stays in
its slot), its episode's env step runs while the others keep decoding, and when the episode
submits its next turn it joins the batch again, encoding only the new tokens (tool results,
next header) on top of its cached KV. Fresh episodes that share a prompt prefix (the system
prompt and tool schemas) encode it once; identical prompts (the G members of a group) are
encoded once and their KV copied.

Token-in/token-out is exact: the KV of a slot is keyed by the ids it holds, and a context that
does not extend them is re-encoded from scratch. Logprobs are log-softmax(logits / T) of the
distribution each token was drawn from (float32); per-request ``sample_seed`` makes the draw
independent of batch composition (:mod:`agentic_rl.policy.sampling`), so this path and the
simple HFPolicy path give the same tokens and logprobs to float tolerance (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.policy.llama_decoder import SlotLlamaDecoder, UnsupportedModel
from agentic_rl.policy.sampling import RowSampler, sample_tokens

__all__ = ["FastPolicy", "DecodeStream", "make_policy", "make_policy_from_config"]


@dataclass
class _Admission:
    """Rows joining the batch at one step, between :meth:`DecodeStream._admit` and the forward."""

    joining: list[tuple[int, _Row]]
    ctxs: list[list[int]]
    base: int  # slot of the first joining row
    order: list[int]  # joining indices in slot order: encoded rows, then duplicates
    enc: list[int]  # joining indices encoded by the forward (slots base .. base + len(enc) - 1)
    dup_of: dict[int, int]  # duplicate -> its leader (same fresh context)
    new_ids: list[list[int]]  # per encoded row: the tokens not yet in its KV
    past: list[int]  # per encoded row: cached length


@dataclass
class _Row:
    request: GenerationRequest
    key: str
    sampler: RowSampler
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class FastPolicy:
    """Sample from a Llama-family HF model with :class:`SlotLlamaDecoder` (see module docstring).

    Args:
        model: ``LlamaForCausalLM`` or a peft wrapper of one (the trained model; read only).
        eos_token_id: id that ends a turn.
        pad_token_id: accepted for interface parity with HFPolicy (the slot cache needs no padding).
        generator: torch RNG for requests without ``sample_seed``.
        max_batch: most rows decoded together; further submissions wait in a queue.
        min_shared_prefix: fresh rows encode a common prefix once when it has this many tokens.
        dtype: precision of the sampling copy (:class:`SlotLlamaDecoder`); default the model's.
            With ``torch.bfloat16`` the recorded logprobs are the bf16 sampler's, not the
            trainer's: the update's importance ratio π_θ/μ then corrects the mismatch, as for
            an external inference server.
        static_decode: ``"graphs"`` (decode steps replayed as CUDA graphs, CUDA only),
            ``"eager"`` (the same static-shape step, uncaptured) or None (the ragged forward
            for every step); see :mod:`agentic_rl.policy.decode_graphs`.

    Raises:
        UnsupportedModel: the model is not a Llama (use :func:`make_policy` to fall back).
    """

    def __init__(
        self,
        model,
        eos_token_id: int,
        pad_token_id: int | None = None,
        generator: torch.Generator | None = None,
        max_batch: int = 64,
        min_shared_prefix: int = 16,
        dtype: torch.dtype | None = None,
        static_decode: str | None = None,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model = model
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.generator = generator
        self.max_batch = max_batch
        self.min_shared_prefix = min_shared_prefix
        self.decoder = SlotLlamaDecoder(model, dtype=dtype, static_decode=static_decode)
        self._slot_of: dict[str, int] = {}
        self._owner: list[str | None] = [None] * self.decoder.num_slots
        self._kv_ids: list[list[int]] = [[] for _ in range(self.decoder.num_slots)]
        self._anon = 0

    def clear_cache(self) -> None:
        """Forget every episode's KV and free the cache memory."""
        self._slot_of.clear()
        self.decoder.release_memory()
        self._owner = [None] * self.decoder.num_slots
        self._kv_ids = [[] for _ in range(self.decoder.num_slots)]

    def open_stream(self, sampling: SamplingParams) -> DecodeStream:
        """A decode stream over this policy's KV slots (see the module docstring)."""
        return DecodeStream(self, sampling)

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Sample a continuation for every request (all decoded together, continuously batched).

        Keys not in ``requests`` lose their cached KV (same contract as HFPolicy).

        Raises:
            ValueError: an empty context or ``max_new_tokens < 1``.
        """
        wanted = {r.cache_key for r in requests if r.cache_key is not None}
        for key in [k for k in self._slot_of if k not in wanted]:
            self._free(key)
        results: dict[int, Generation] = {}
        with self.open_stream(sampling) as stream:
            tags = [stream.submit(r) for r in requests]
            while stream.busy:
                for tag, gen in stream.step_tagged():
                    results[tag] = gen
        return [results[t] for t in tags]

    # ---- slot bookkeeping (used by DecodeStream) ---------------------------------------------
    def _free(self, key: str) -> None:
        slot = self._slot_of.pop(key, None)
        if slot is not None:
            self._owner[slot] = None
            self._kv_ids[slot] = []

    def _ensure_slots(self, count: int) -> None:
        if count > self.decoder.num_slots:
            self.decoder.reserve(count, self.decoder.capacity)
            extra = self.decoder.num_slots - len(self._owner)
            self._owner.extend([None] * extra)
            self._kv_ids.extend([] for _ in range(extra))

    def _swap(self, a: int, b: int) -> None:
        """Exchange two slots (KV and ownership)."""
        if a == b:
            return
        self.decoder.swap(a, b, max(len(self._kv_ids[a]), len(self._kv_ids[b])))
        self._owner[a], self._owner[b] = self._owner[b], self._owner[a]
        self._kv_ids[a], self._kv_ids[b] = self._kv_ids[b], self._kv_ids[a]
        for s in (a, b):
            if self._owner[s] is not None:
                self._slot_of[self._owner[s]] = s


class DecodeStream:
    """Continuous-batching decode loop over a :class:`FastPolicy`'s slots (context manager).

    Invariant: the ``B`` live rows occupy slots ``0 .. B - 1`` in order, so the batch's KV is a
    view of the cache. Not thread-safe: drive it from one thread.
    """

    def __init__(self, policy: FastPolicy, sampling: SamplingParams) -> None:
        policy.decoder.refresh_parameters()  # once per stream; every step then checks their versions
        self.policy = policy
        self.sampling = sampling
        self._queue: list[tuple[int, _Row]] = []
        self._active: list[tuple[int, _Row]] = []
        self._pending: list[int] = []  # last sampled token of each active row (not yet in KV)
        self._next_tag = 0

    def __enter__(self) -> DecodeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._queue.clear()
        self._active.clear()

    @property
    def busy(self) -> bool:
        """True while rows are queued or decoding."""
        return bool(self._queue or self._active)

    def submit(self, request: GenerationRequest) -> int:
        """Queue one request; returns its tag (used by :meth:`step_tagged`).

        Raises:
            ValueError: an empty context, ``max_new_tokens < 1``, or its cache key is already
                queued or decoding.
        """
        if not request.context_ids or request.max_new_tokens < 1:
            raise ValueError("each request needs a non-empty context and max_new_tokens >= 1")
        key = request.cache_key
        if key is None:
            self.policy._anon += 1
            key = f"__anon-{self.policy._anon}"
        if any(r.key == key for _, r in self._queue + self._active):
            raise ValueError(f"cache key {key!r} is already in the stream")
        tag = self._next_tag
        self._next_tag += 1
        self._queue.append((tag, _Row(request, key, RowSampler(request.sample_seed))))
        return tag

    def release(self, key: str) -> None:
        """Free the KV slot of an episode that will not submit again. Never raises."""
        self._queue = [(t, r) for t, r in self._queue if r.key != key]
        if not any(r.key == key for _, r in self._active):
            self.policy._free(key)

    def step(self) -> list[tuple[GenerationRequest, Generation]]:
        """Admit queued rows, sample one token for every live row; returns finished generations."""
        return [(row.request, gen) for row, gen in self._step()]

    def step_tagged(self) -> list[tuple[int, Generation]]:
        """As :meth:`step`, with the tags :meth:`submit` returned instead of the requests."""
        tags = {id(row): tag for tag, row in self._queue + self._active}
        return [(tags[id(row)], gen) for row, gen in self._step()]

    # ---- internals ----------------------------------------------------------------------------
    def _step(self) -> list[tuple[_Row, Generation]]:
        pol = self.policy
        pol.decoder.sync()
        old = len(self._active)
        ids = [[t] for t in self._pending]
        past = [len(pol._kv_ids[s]) for s in range(old)]
        for s, t in enumerate(self._pending):
            pol._kv_ids[s].append(t)
        room = pol.max_batch - old
        admission = None
        if room > 0 and self._queue:
            joining, self._queue = self._queue[:room], self._queue[room:]
            admission = self._admit(joining)
            ids += admission.new_ids
            past += admission.past
        if not ids:
            return []
        # one forward for the decoding rows and the joining rows' new tokens (weights read once)
        logits = pol.decoder.forward(0, ids, past)
        if admission is not None:
            logits = torch.cat([logits[:old], self._finish_admission(admission, logits[old:])])
        rows = [row for _, row in self._active]
        tokens, lps = sample_tokens(logits, self.sampling, [r.sampler for r in rows], pol.generator)
        done: list[tuple[_Row, Generation]] = []
        leaving: list[int] = []
        for i, (row, tok, lp) in enumerate(zip(rows, tokens, lps)):
            row.tokens.append(tok)
            row.logprobs.append(lp)
            finished = tok == pol.eos_token_id
            if finished or len(row.tokens) >= row.request.max_new_tokens:
                done.append((row, Generation(tuple(row.tokens), tuple(row.logprobs), finished)))
                leaving.append(i)
        self._pending = tokens
        for i in reversed(
            leaving
        ):  # keep live rows in slots 0 .. B-1: move the leaver past the end
            last = len(self._active) - 1
            pol._swap(i, last)
            self._active[i], self._active[last] = self._active[last], self._active[i]
            self._pending[i], self._pending[last] = self._pending[last], self._pending[i]
            self._active.pop()
            self._pending.pop()
        for row, _ in done:
            if row.key.startswith("__anon-"):
                pol._free(row.key)
        return done

    def _place(self, key: str, target: int) -> None:
        """Move ``key``'s slot (allocating one if needed) to slot ``target``."""
        pol = self.policy
        slot = pol._slot_of.get(key)
        if slot is None:
            free = next((s for s in range(target, len(pol._owner)) if pol._owner[s] is None), None)
            if free is None:
                pol._ensure_slots(len(pol._owner) + 1)
                free = next(s for s in range(target, len(pol._owner)) if pol._owner[s] is None)
            pol._owner[free], pol._kv_ids[free] = key, []
            pol._slot_of[key] = slot = free
        pol._swap(slot, target)

    def _admit(self, joining: list[tuple[int, _Row]]) -> _Admission:
        """Give each joining row a slot after the live ones (slots ``B ..``), encode the prompt
        prefix shared by fresh rows, and return what the step's forward must encode: each row's
        new tokens on top of its reusable KV. Identical fresh contexts are encoded once (leaders)
        and copied to their duplicates by :meth:`_finish_admission`."""
        pol, dec = self.policy, self.policy.decoder
        base = len(self._active)
        # every owned slot stays owned; each joining key without a slot needs one more
        pol._ensure_slots(
            len(pol._slot_of) + sum(row.key not in pol._slot_of for _, row in joining)
        )
        ctxs = [list(row.request.context_ids) for _, row in joining]
        # reuse a slot's KV only if its ids are a proper prefix of the new context
        for (_, row), ctx in zip(joining, ctxs):
            slot = pol._slot_of.get(row.key)
            if slot is not None and not (
                len(pol._kv_ids[slot]) < len(ctx)
                and ctx[: len(pol._kv_ids[slot])] == pol._kv_ids[slot]
            ):
                pol._kv_ids[slot] = []
        need = max(len(c) + r.request.max_new_tokens for c, (_, r) in zip(ctxs, joining))
        dec.reserve(dec.num_slots, need)
        leaders: dict[tuple[int, ...], int] = {}
        order, dup_of = [], {}
        for j, ((_, row), ctx) in enumerate(zip(joining, ctxs)):
            fresh = not pol._kv_ids[pol._slot_of[row.key]] if row.key in pol._slot_of else True
            if fresh and tuple(ctx) in leaders:
                dup_of[j] = leaders[tuple(ctx)]
            else:
                if fresh:
                    leaders[tuple(ctx)] = j
                order.append(j)
        order += sorted(dup_of)
        for pos, j in enumerate(order):
            self._place(joining[j][1].key, base + pos)
        enc = [j for j in order if j not in dup_of]
        self._share_prefix(
            [base + p for p, j in enumerate(order) if j in leaders.values()],
            [ctxs[j] for j in order if j in leaders.values()],
        )
        past = [len(pol._kv_ids[base + p]) for p in range(len(enc))]
        return _Admission(
            joining, ctxs, base, order, enc, dup_of, [ctxs[j][n:] for j, n in zip(enc, past)], past
        )

    def _finish_admission(self, adm: _Admission, logits: torch.Tensor) -> torch.Tensor:
        """After the forward that encoded ``adm.new_ids``: record the slots' ids, copy the leaders'
        KV to their duplicates, append the rows to the batch; returns their ``[J, V]`` logits in
        admission order from the encoded rows' ``logits`` (``[len(adm.enc), V]``)."""
        pol, dec = self.policy, self.policy.decoder
        base, ctxs = adm.base, adm.ctxs
        for p, j in enumerate(adm.enc):
            pol._kv_ids[base + p] = list(ctxs[j])
        row_of = {j: p for p, j in enumerate(adm.enc)}
        for pos, j in enumerate(adm.order):
            if j in adm.dup_of:
                dec.copy(base + row_of[adm.dup_of[j]], base + pos, len(ctxs[j]))
                pol._kv_ids[base + pos] = list(ctxs[j])
        self._active.extend(adm.joining[j] for j in adm.order)
        return logits[[row_of.get(j, row_of.get(adm.dup_of.get(j, -1), 0)) for j in adm.order]]

    def _share_prefix(self, slots: list[int], ctxs: list[list[int]]) -> None:
        """Encode the prefix common to fresh contexts once and copy its KV to each slot."""
        pol, dec = self.policy, self.policy.decoder
        if len(slots) < 2:
            return
        first = ctxs[0]
        n = min(len(c) for c in ctxs) - 1
        shared = 0
        while shared < n and all(c[shared] == first[shared] for c in ctxs):
            shared += 1
        if shared < pol.min_shared_prefix:
            return
        dec.forward(slots[0], [first[:shared]], [0])
        for s in slots[1:]:
            dec.copy(slots[0], s, shared)
        for s in slots:
            pol._kv_ids[s] = list(first[:shared])


def make_policy(
    model,
    eos_token_id: int,
    pad_token_id: int,
    generator: torch.Generator | None = None,
    fast: bool = True,
    max_batch: int = 64,
    dtype: torch.dtype | None = None,
    cuda_graphs: bool = False,
):
    """:class:`FastPolicy` for Llama models when ``fast``, else (or if unsupported) ``HFPolicy``.

    ``cuda_graphs``: the fast sampler replays its decode steps as CUDA graphs when the model
    is on a CUDA device (ignored elsewhere).

    Raises:
        UnsupportedModel: a sampling ``dtype`` other than the model's was asked for and the fast
            sampler cannot run this model (only it samples from a lower-precision copy).
    """
    from agentic_rl.policy.hf import HFPolicy

    other_dtype = dtype is not None and dtype != next(model.parameters()).dtype
    if fast:
        try:
            return FastPolicy(
                model,
                eos_token_id,
                pad_token_id,
                generator=generator,
                max_batch=max_batch,
                dtype=dtype,
                static_decode="graphs" if cuda_graphs and _on_cuda(model) else None,
            )
        except UnsupportedModel:
            if other_dtype:
                raise
    elif other_dtype:
        raise UnsupportedModel(
            f"sampling in {dtype} needs the fast sampler (model.sampler = 'fast')"
        )
    return HFPolicy(model, eos_token_id, pad_token_id, generator=generator)


def _on_cuda(model) -> bool:
    return next(model.parameters()).device.type == "cuda"


def make_policy_from_config(
    model,
    model_config,
    eos_token_id: int,
    pad_token_id: int,
    generator: torch.Generator | None = None,
):
    """:func:`make_policy` with the sampler settings of a ``[model]`` config section
    (:class:`~agentic_rl.config.ModelConfig`: ``sampler``, ``max_batch``, ``sampler_dtype``,
    ``precision``, ``cuda_graphs``), resolved for the device ``model`` is on
    (:func:`~agentic_rl.policy.device.resolve_placement`: ``auto`` sampler dtype is bf16 when
    the precision is a bf16 one, e.g. ``auto`` on CUDA).

    Raises:
        UnsupportedModel: as :func:`make_policy`.
    """
    from agentic_rl.policy.device import resolve_placement

    fast = model_config.sampler == "fast"
    placement = resolve_placement(
        str(next(model.parameters()).device),
        model_config.precision,
        model_config.sampler_dtype,
        fast_sampler=fast,
        cuda_graphs=model_config.cuda_graphs,
    )
    return make_policy(
        model,
        eos_token_id,
        pad_token_id,
        generator=generator,
        fast=fast,
        max_batch=model_config.max_batch,
        dtype=placement.sampler_dtype if fast else None,
        cuda_graphs=placement.cuda_graphs,
    )
