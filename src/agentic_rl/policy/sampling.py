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

The chosen token's logprob is ``z_c - logsumexp(z)`` with ``z = logits / T`` in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from agentic_rl.policy.base import SamplingParams

__all__ = ["RowSampler", "sample_tokens"]


class RowSampler:
    """The noise stream of one row: a seeded numpy ``Generator``, or None (use the shared RNG)."""

    __slots__ = ("rng",)

    def __init__(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed % 2**64) if seed is not None else None


def sample_tokens(
    logits: torch.Tensor,
    sampling: SamplingParams,
    rows: Sequence[RowSampler],
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[float]]:
    """Sample one token per row.

    Args:
        logits: ``[B, V]`` next-token logits (any float dtype; computed in float32).
        sampling: temperature T and greedy flag.
        rows: one :class:`RowSampler` per row (length B).
        generator: torch RNG for rows without a seed.

    Returns:
        ``(tokens, logprobs)``: B token ids and their log-softmax(logits / T) values.

    Raises:
        ValueError: ``len(rows) != B``.
    """
    if len(rows) != logits.shape[0]:
        raise ValueError(f"{len(rows)} row samplers for {logits.shape[0]} rows")
    z = logits.float() / sampling.temperature
    if sampling.greedy:
        chosen = z.argmax(dim=-1)
    else:
        vocab = z.shape[-1]
        noise = []
        for r in rows:
            rng = r.rng
            if rng is None:
                rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
            noise.append(rng.standard_exponential(vocab, dtype=np.float32))
        race = torch.from_numpy(np.stack(noise)).to(z.device)
        chosen = (z - race.log_()).argmax(dim=-1)
    chosen_lp = z.gather(-1, chosen[:, None]).squeeze(-1) - torch.logsumexp(z, dim=-1)
    return chosen.tolist(), chosen_lp.tolist()
