"""Token sampling shared by every torch policy: one distribution, recorded logprobs, seeded rows.

``sample_tokens`` draws one token per row from softmax(logits / T) and returns the token with
its log-probability under that very distribution (float32), so importance ratios against the
trainer's logprobs are exact up to float error.

Randomness is per row, not per batch: a row whose request carries a ``sample_seed`` draws its
noise from its own ``numpy.random.Generator`` (PCG64; numpy's ziggurat exponential sampler is
~4x faster than torch's ``exponential_`` on CPU). The token is chosen by the exponential race
(the Gumbel-max trick in multiplicative form): ``argmax_i p_i / E_i`` with ``E_i ~ Exp(1)`` i.i.d.,
which selects token i with probability exactly p_i (Gumbel 1954; see e.g. Huijben et al. 2022,
"A Review of the Gumbel-max Trick"). Which other rows share the batch, in which order, or
whether the row is decoded alone then changes nothing: the continuous-batching decoder and the
simple turn-by-turn path produce the same tokens for the same seeds. Unlike inverse-CDF
sampling, the choice is insensitive to float error in the logits except when two tokens' races
tie within that error. Rows without a seed get a fresh noise generator seeded from the policy's
``torch.Generator`` (or the global torch RNG), so seeded runs stay reproducible.

On a GPU the noise is counter-based instead (:func:`counter_uniform`): a row's noise for its
k-th draw at token v is a hash of (row seed, k, v) — SplitMix64 (Steele, Lea and Flood 2014,
"Fast splittable pseudorandom number generators"), the way Philox-style counter RNGs work
(Salmon et al. 2011) — computed for the whole ``[B, V]`` batch in one pass on the device.
Per-row numpy streams would cost B host draws of V floats and a host-to-device copy per
decode step, more than the GPU's whole decode step. The choice is the same Gumbel-max race
(E = −log U), still a function of the row's seed and its own draw count only, so the
schedule-independence above holds on the GPU too; the CPU and GPU streams of one seed differ.

Both noise sources keep E strictly positive and finite where it matters: the CPU draws are
float64 and the counter uniforms stay below 1, so a token whose probability is e^-40 is drawn
with about that probability. (Before 2026-12-04 the CPU noise was float32, whose ziggurat
returns exactly 0 about once per 2**23 entries, and the counter uniforms could round to 1:
either way a uniformly random token won ~0.6 % of draws at SmolLM2's 49,152-token vocabulary and
~3 % at Gemma 3's 262,144; runs recorded before then sampled with that defect.)

The chosen token's logprob is ``z_c - logsumexp(z)`` with ``z = logits / T`` in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from agentic_rl.policy.base import SamplingParams

__all__ = ["RowSampler", "counter_uniform", "sample_tokens", "splitmix64", "uniform_from_states"]

_U64 = 2**64
#: SplitMix64's increment (the golden ratio in 64-bit fixed point) and its two multipliers
_GAMMA, _MUL1, _MUL2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _signed(x: int) -> int:
    """The int64 with the same 64 bits as the unsigned ``x``."""
    return x - _U64 if x >= 2**63 else x


def splitmix64(x: int) -> int:
    """SplitMix64's output function of the unsigned 64-bit state ``x`` (Python ints, exact)."""
    z = x % _U64
    z = ((z ^ (z >> 30)) * _MUL1) % _U64
    z = ((z ^ (z >> 27)) * _MUL2) % _U64
    return z ^ (z >> 31)


def _mix_tensor(z: torch.Tensor) -> torch.Tensor:
    """:func:`splitmix64` elementwise on int64 tensors holding the 64 bits of unsigned states.

    int64 multiplication wraps modulo 2**64 on CPUs and GPUs (two's complement), which is
    unsigned multiplication modulo 2**64 on the same bits; right shifts are masked to act as
    logical shifts. Tested bit for bit against the Python reference.
    """
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * _signed(_MUL1)
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * _signed(_MUL2)
    return z ^ ((z >> 31) & ((1 << 33) - 1))


_VOCAB_OFFSETS: dict[tuple[int, str], torch.Tensor] = {}


def _vocab_offsets(vocab: int, device: torch.device) -> torch.Tensor:
    """``[V]`` int64: v · γ mod 2**64 for each token v (cached per vocabulary size and device)."""
    key = (vocab, str(device))
    if key not in _VOCAB_OFFSETS:  # int64 products wrap modulo 2**64 (see _mix_tensor)
        tokens = torch.arange(vocab, dtype=torch.int64, device=device)
        _VOCAB_OFFSETS[key] = tokens * _signed(_GAMMA)
    return _VOCAB_OFFSETS[key]


def counter_uniform(keys: Sequence[int], vocab: int, device: torch.device | str) -> torch.Tensor:
    """Uniform noise in (0, 1) of shape ``[B, V]``: entry (b, v) is a hash of ``keys[b]`` and v.

    U = (top 23 bits of splitmix64(key_b + (v + 1)·γ) + 0.5) / 2**23, exactly representable
    in float32 and strictly inside (0, 1): with 24 bits the top value rounded to 1.0, and
    E = −log 1 = 0 made that token win whatever its probability (once per 2**24 entries, ~1.6 %
    of draws over a 262,144-token vocabulary). Distinct (key, v) pairs give independent-looking draws
    (SplitMix64 passes BigCrush). Computed on ``device`` in one pass.

    Args:
        keys: B unsigned 64-bit row keys (one per row and draw; :meth:`RowSampler.draw_key`).
        vocab: V.
    """
    device = torch.device(device)
    rows = torch.tensor([_signed((k + _GAMMA) % _U64) for k in keys], device=device)
    return uniform_from_states(rows, vocab)


def uniform_from_states(rows: torch.Tensor, vocab: int) -> torch.Tensor:
    """The device half of :func:`counter_uniform`: ``rows`` ``[B]`` int64 row states (key + γ,
    on the device) to ``[B, V]`` float32 uniforms, with no host round trip."""
    state = rows.unsqueeze(1) + _vocab_offsets(vocab, rows.device).unsqueeze(0)  # [B, V], wraps
    bits = (_mix_tensor(state) >> 41) & 0x7FFFFF  # top 23 bits: (bits + 0.5) is exact in float32
    return (bits.float() + 0.5) * (1.0 / 2**23)


class RowSampler:
    """The noise stream of one row: a seeded numpy ``Generator`` (CPU) and a counter-based key
    (GPU, :func:`counter_uniform`), or neither (use the shared RNG).

    Attributes:
        rng: the row's numpy generator, None without a seed.
        seed: the row's seed (None without one). draws: how many tokens the row drew so far.
    """

    __slots__ = ("rng", "seed", "draws")

    def __init__(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed % 2**64) if seed is not None else None
        self.seed = seed
        self.draws = 0

    def draw_key(self, generator: torch.Generator | None = None) -> int:
        """The counter-based key of this row's next draw (and count the draw): a hash of the
        seed and the draw number; rows without a seed get a fresh key from ``generator``."""
        if self.seed is None:
            return int(torch.randint(0, 2**62, (1,), generator=generator))
        key = splitmix64(splitmix64(self.seed % _U64) + self.draws)
        self.draws += 1
        return key


def sample_tokens(
    logits: torch.Tensor,
    sampling: SamplingParams,
    rows: Sequence[RowSampler],
    generator: torch.Generator | None = None,
    counter_noise: bool | None = None,
) -> tuple[list[int], list[float]]:
    """Sample one token per row.

    Args:
        logits: ``[B, V]`` next-token logits (any float dtype; computed in float32).
        sampling: temperature T and greedy flag.
        rows: one :class:`RowSampler` per row (length B).
        generator: torch RNG for rows without a seed.
        counter_noise: draw the noise with :func:`counter_uniform` (True) or the rows' numpy
            streams (False); None: counter-based off the CPU, numpy on the CPU.

    Returns:
        ``(tokens, logprobs)``: B token ids and their log-softmax(logits / T) values.

    Raises:
        ValueError: ``len(rows) != B``.
    """
    if len(rows) != logits.shape[0]:
        raise ValueError(f"{len(rows)} row samplers for {logits.shape[0]} rows")
    z = logits.float() / sampling.temperature
    counter = z.device.type != "cpu" if counter_noise is None else counter_noise
    if sampling.greedy:
        chosen = z.argmax(dim=-1)
    elif not counter:
        vocab = z.shape[-1]
        noise = []
        for r in rows:
            rng = r.rng
            if rng is None:
                rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
            # float64: numpy's float32 ziggurat returns exactly 0 with probability ~2**-23
            # per entry, and log 0 = -inf lets that token win whatever its probability (a
            # 262,144-token vocabulary drew such a token in ~3 % of draws); float64's zero
            # atom is ~2**-52 and its smallest values stay finite after the log
            noise.append(rng.standard_exponential(vocab))
        race = torch.from_numpy(np.log(np.stack(noise))).to(z.device, torch.float32)
        chosen = (z - race).argmax(dim=-1)
    else:  # accelerator: counter-based noise made on the device (module docstring)
        uniform = counter_uniform([r.draw_key(generator) for r in rows], z.shape[-1], z.device)
        chosen = (z - (-uniform.log_()).log_()).argmax(dim=-1)  # race with E = -log U
    chosen_lp = z.gather(-1, chosen[:, None]).squeeze(-1) - torch.logsumexp(z, dim=-1)
    out = torch.stack([chosen.double(), chosen_lp.double()]).cpu()  # one device-to-host copy
    return out[0].long().tolist(), out[1].float().tolist()
