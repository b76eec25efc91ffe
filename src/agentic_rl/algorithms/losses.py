"""Policy-gradient losses, KL estimators and token log-probabilities.

PPO clipped surrogate (Schulman et al. 2017, "Proximal Policy Optimization Algorithms",
arXiv:1707.06347, eq. 7), per token t of trajectory i, with rho = exp(logp - old_logp):
    L_it = -min( rho * A_it, clip(rho, 1 - eps_low, 1 + eps_high) * A_it )
    loss = sum_it(L_it * m_it) / normalizer,   normalizer = sum_it(m_it) by default
GRPO (arXiv:2402.03300) uses the same surrogate with group advantages.

Deviations and choices:
- Asymmetric clip range (eps_low, eps_high): "clip-higher" from DAPO (Yu et al. 2025,
  arXiv:2503.14476). Equal values give the original PPO clip.
- Token-mean aggregation (DAPO): every trained token in the batch weighs the same, instead of
  GRPO's per-sequence mean then batch mean. ``normalizer`` lets a trainer pass the total
  number of trained tokens of the whole optimizer step, so gradient-accumulation
  micro-batches sum to one global token-mean.
- Masked positions are replaced by 0 with ``torch.where`` *before* any exp, so garbage there
  (NaN, -inf) reaches neither the loss nor the gradients.
- Log-ratios and logprobs are computed in float32 even when the inputs are bf16/fp16.

KL estimators (J. Schulman, "Approximating KL Divergence", 2020,
http://joschu.net/blog/kl-approx.html), samples from the policy, d = ref_logp - logp:
    k1 = -d,   k2 = d^2 / 2,   k3 = exp(d) - d - 1  (unbiased for KL(pi||ref), always >= 0;
    the one GRPO uses).

Token logprobs are log_softmax(logits / temperature)[target], computed in row chunks by a
small custom autograd function so neither forward nor backward holds a float32 copy of the
full [B, T, V] logits (differentiable once; no double backward).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "KL_ESTIMATORS",
    "entropy_from_logits",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean",
    "ppo_clip_loss",
    "token_logprobs_from_logits",
]


def masked_mean(x: Tensor, mask: Tensor, normalizer: float | None = None) -> Tensor:
    """Token-mean of ``x`` over the positions where ``mask`` is non-zero.

    out = sum(x * mask) / (normalizer if given else max(sum(mask), 1)).
    Token-mean as in DAPO (Yu et al. 2025, arXiv:2503.14476); pass ``normalizer`` = the
    number of trained tokens in the whole optimizer step to make gradient-accumulation
    micro-batches add up to one global token-mean. Positions with mask 0 are dropped with
    ``torch.where``, so NaN/inf there never propagates.

    Args:
        x: any shape. mask: same shape, bool or float (0/1 or weights).
        normalizer: positive denominator, or None.

    Returns:
        scalar tensor.
    """
    if x.shape != mask.shape:
        raise ValueError(f"x {tuple(x.shape)} and mask {tuple(mask.shape)} differ in shape")
    if normalizer is not None and not normalizer > 0:
        raise ValueError(f"normalizer must be > 0, got {normalizer}")
    keep = mask != 0
    w = mask.to(x.dtype)
    total = (torch.where(keep, x, torch.zeros_like(x)) * w).sum()
    if normalizer is None:
        return total / w.sum().clamp(min=1)
    return total / normalizer


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    normalizer: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate loss (Schulman et al. 2017, arXiv:1707.06347), token-mean.

    rho = exp(logprobs - old_logprobs)
    L_t = -min(rho * A_t, clip(rho, 1 - clip_eps_low, 1 + clip_eps_high) * A_t)
    loss = masked_mean(L, loss_mask, normalizer)

    Args:
        logprobs: [B, T] current policy logprobs of the sampled tokens (with grad).
        old_logprobs: [B, T] logprobs under the policy that sampled them (no grad needed).
        advantages: [B, T] per-token advantages (see ``broadcast_to_tokens``).
        loss_mask: [B, T] bool or 0/1; 0 for prompt, env/tool and padding tokens.
        clip_eps_low, clip_eps_high: clip range [1 - low, 1 + high] (DAPO clip-higher).
        normalizer: see ``masked_mean``.

    Returns:
        (scalar loss, metrics) where metrics, averaged over masked tokens, are
        "clip_fraction" (tokens where the clipped term is the active one: rho > 1+high with
        A > 0, or rho < 1-low with A < 0; these get zero gradient), "ratio_mean", and
        "approx_kl" (mean of old_logprobs - logprobs, the k1 estimate of KL(old || new)).
    """
    shape = logprobs.shape
    for name, t in (("old_logprobs", old_logprobs), ("advantages", advantages),
                    ("loss_mask", loss_mask)):
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, logprobs {tuple(shape)}")
    keep = loss_mask != 0
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    log_ratio = torch.where(keep, logprobs.float() - old_logprobs.detach().float(), zero)
    adv = torch.where(keep, advantages.detach().float(), zero)
    ratio = torch.exp(log_ratio)
    clipped_ratio = ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    per_token = -torch.minimum(ratio * adv, clipped_ratio * adv)
    loss = masked_mean(per_token, loss_mask, normalizer)

    with torch.no_grad():
        clipped = ((adv > 0) & (ratio > 1.0 + clip_eps_high)) | (
            (adv < 0) & (ratio < 1.0 - clip_eps_low)
        )
        metrics = {
            "clip_fraction": masked_mean(clipped.float(), loss_mask).item(),
            "ratio_mean": masked_mean(ratio, loss_mask).item(),
            "approx_kl": masked_mean(-log_ratio, loss_mask).item(),
        }
    return loss, metrics


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1 KL estimate per token (Schulman 2020): logp - ref_logp. Unbiased, can be < 0.

    Shapes: any, equal -> same shape.
    """
    return logprobs - ref_logprobs


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2 KL estimate per token (Schulman 2020): 0.5 * (logp - ref_logp)^2. Biased, >= 0.

    Shapes: any, equal -> same shape.
    """
    return 0.5 * (logprobs - ref_logprobs) ** 2


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 KL estimate per token (Schulman 2020; the KL term of GRPO, arXiv:2402.03300).

    k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1, computed as expm1(d) - d for accuracy
    near d = 0. Unbiased for KL(pi || ref) under samples from pi, always >= 0, exactly 0
    when the two are equal. Shapes: any, equal -> same shape.
    """
    d = ref_logprobs - logprobs
    return torch.expm1(d) - d


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
}


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution softmax(logits) over the last axis.

    H = -sum_v p_v log p_v with log p = log_softmax(logits) (stable, float32). Entries with
    p_v = 0 (logit -inf) contribute exactly 0, also in the gradient.

    Args:
        logits: [..., V]. Returns: [...] float32.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    safe_logp = torch.where(p > 0, logp, torch.zeros_like(logp))
    return -(p * safe_logp).sum(dim=-1)


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """log p(target) for [R, V] logits, chunked over rows; backward recomputes softmax.

    Saves only the input logits (already alive as the model output), the targets and one
    float32 log-normaliser per row, never a full-vocabulary float32 copy.
    d out_r / d z_rv = (1[v = y_r] - softmax(z_r)_v) / temperature.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float, chunk: int) -> Tensor:
        out = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(out)
        for s in range(0, logits.shape[0], chunk):
            z = logits[s : s + chunk].float() / temperature
            lse[s : s + chunk] = torch.logsumexp(z, dim=-1)
            picked = z.gather(-1, targets[s : s + chunk, None]).squeeze(-1)
            out[s : s + chunk] = picked - lse[s : s + chunk]
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature, ctx.chunk = temperature, chunk
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, targets, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], ctx.chunk):
            z = logits[s : s + ctx.chunk].float() / ctx.temperature
            g_rows = grad_out[s : s + ctx.chunk, None].float()
            g = torch.exp(z - lse[s : s + ctx.chunk, None]) * -g_rows
            g.scatter_add_(-1, targets[s : s + ctx.chunk, None], g_rows)
            grad[s : s + ctx.chunk] = g / ctx.temperature
        return grad, None, None, None


def token_logprobs_from_logits(
    logits: Tensor,
    target_ids: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> Tensor:
    """Log-probabilities of ``target_ids`` under softmax(logits / temperature).

    out[b, t] = z[b, t, y] - logsumexp_v z[b, t, v],  z = logits / temperature,
    y = target_ids[b, t]; i.e. log_softmax(z)[y], in float32. The B*T rows are processed
    ``chunk_size`` at a time, so at most one chunk of float32 full-vocabulary values exists
    at once, in forward and in backward (a custom autograd function saves the logits and one
    float32 normaliser per row, and recomputes the softmax chunk by chunk in backward).
    Differentiable once w.r.t. ``logits``. Use the sampling temperature so the logprobs
    match those the rollout recorded.

    Args:
        logits: [B, T, V] (any float dtype). target_ids: [B, T] integer, in [0, V).
        temperature: > 0. chunk_size: rows per chunk, > 0.

    Returns:
        [B, T] float32.
    """
    if logits.shape[:-1] != target_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match target_ids {tuple(target_ids.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_targets = target_ids.reshape(-1).long()
    out = _ChunkedTokenLogprobs.apply(flat_logits, flat_targets, float(temperature), chunk_size)
    return out.reshape(target_ids.shape)
