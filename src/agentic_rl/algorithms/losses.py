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

Loss aggregation (token-mean, seq-mean-token-mean, seq-mean-token-sum / C) and its bias: see
``token_loss_weights``. Clipped value loss for PPO with a value model: ``value_loss``.

KL estimators (J. Schulman, "Approximating KL Divergence", 2020,
http://joschu.net/blog/kl-approx.html), samples from the policy, d = ref_logp - logp:
    k1 = -d,   k2 = d^2 / 2,   k3 = exp(d) - d - 1  (unbiased for KL(pi||ref), always >= 0;
    the one GRPO uses).
k3 clamps d to [-20, 20] before the exp (``KL_LOG_RATIO_CLAMP``, as verl's ``kl_penalty`` and
OpenRLHF's ``compute_approx_kl`` do): unclamped, d = 100 (logp -105, ref -5) gives exp(100) = inf
in float32 and bf16 and a non-finite gradient. A clamped token's k3 is the value at the bound
(at most e^20 - 21 ≈ 4.85e8) and passes no gradient; :func:`estimate_kl` counts such tokens so the
trainer can log them. Deviation: verl and OpenRLHF also clamp k3 itself to at most 10, which
already stops the gradient at d ≈ 2.5; this module does not.
A KL estimate is used either as a loss term, loss += β·agg(k) (GRPO), or as a per-token reward
penalty r_t −= β·k_t folded into the returns before the advantages (InstructGPT, Ouyang et al.
2022, arXiv:2203.02155, eq. 2; REINFORCE++): the trainer's ``loss.kl_mode`` picks.

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
    "KL_LOG_RATIO_CLAMP",
    "LOSS_AGGREGATIONS",
    "entropy_from_logits",
    "estimate_kl",
    "get_kl_estimator",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean",
    "ppo_clip_loss",
    "token_logprobs_from_logits",
    "token_loss_weights",
    "value_loss",
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
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate loss (Schulman et al. 2017, arXiv:1707.06347), token-mean.

    rho = exp(logprobs - old_logprobs)
    L_t = -min(rho * A_t, clip(rho, 1 - clip_eps_low, 1 + clip_eps_high) * A_t)
    loss = masked_mean(L, loss_mask, normalizer)

    Args:
        logprobs: [B, T] current policy logprobs of the sampled tokens (with grad).
        old_logprobs: [B, T] logprobs under the policy that sampled them (no grad needed).
        advantages: [B, T] per-token advantages (ignored where ``loss_mask`` is 0).
        loss_mask: [B, T] bool or 0/1; 0 for prompt, env/tool and padding tokens.
        clip_eps_low, clip_eps_high: clip range [1 - low, 1 + high] (DAPO clip-higher).
        normalizer: see ``masked_mean``.
        dual_clip: c > 1 or None. Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in
            MOBA Games with Deep Reinforcement Learning", arXiv:1912.09729, eq. 5): for A < 0
            the objective is max(min(rho·A, clip(rho)·A), c·A), so a huge ratio on a negative
            advantage (a token the sampler found unlikely) cannot produce an unbounded loss;
            such tokens get zero gradient.

    Returns:
        (scalar loss, metrics) where metrics, plain means over the tokens with a non-zero
        ``loss_mask`` (weights do not weigh them), are
        "clip_fraction" (tokens where the clipped term is the active one: rho > 1+high with
        A > 0, or rho < 1-low with A < 0; these get zero gradient), "ratio_mean", and
        "approx_kl" (mean of old_logprobs - logprobs, the k1 estimate of KL(old || new)).
    """
    shape = logprobs.shape
    for name, t in (
        ("old_logprobs", old_logprobs),
        ("advantages", advantages),
        ("loss_mask", loss_mask),
    ):
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, logprobs {tuple(shape)}")
    keep = loss_mask != 0
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    log_ratio = torch.where(keep, logprobs.float() - old_logprobs.detach().float(), zero)
    adv = torch.where(keep, advantages.detach().float(), zero)
    ratio = torch.exp(log_ratio)
    clipped_ratio = ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    objective = torch.minimum(ratio * adv, clipped_ratio * adv)
    if dual_clip is not None:
        if not dual_clip > 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        objective = torch.where(adv < 0, torch.maximum(objective, dual_clip * adv), objective)
    per_token = -objective
    loss = masked_mean(per_token, loss_mask, normalizer)

    with torch.no_grad():
        clipped = ((adv > 0) & (ratio > 1.0 + clip_eps_high)) | (
            (adv < 0) & (ratio < 1.0 - clip_eps_low)
        )
        metrics = {  # plain means over the trained tokens (not weighted by loss weights)
            "clip_fraction": masked_mean(clipped.float(), keep).item(),
            "ratio_mean": masked_mean(ratio, keep).item(),
            "approx_kl": masked_mean(-log_ratio, keep).item(),
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


#: bound of the log-ratio d = ref_logp - logp inside k3 (verl, OpenRLHF): exp(20) ≈ 4.85e8 is finite
KL_LOG_RATIO_CLAMP = 20.0


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 KL estimate per token (Schulman 2020; the KL term of GRPO, arXiv:2402.03300).

    k3 = exp(d) - d - 1 with d = clamp(ref_logp - logp, -20, 20) (``KL_LOG_RATIO_CLAMP``),
    computed in float32 as expm1(d) - d for accuracy near d = 0. Unbiased for KL(pi || ref)
    under samples from pi where |d| <= 20, always >= 0, exactly 0 when the two are equal.
    Tokens with |d| > 20 get the value at the bound and no gradient (count them with
    :func:`estimate_kl`); without the clamp, d = 100 overflows to inf. Shapes: any, equal ->
    same shape, dtype at least float32.
    """
    d = (ref_logprobs.float() - logprobs.float()).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
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


def estimate_kl(name: str, logprobs: Tensor, ref_logprobs: Tensor) -> tuple[Tensor, int]:
    """Per-token KL estimate ``name`` (``k1``/``k2``/``k3``) and the number of clamped tokens.

    The count is the number of tokens whose log-ratio |ref_logp - logp| exceeds
    ``KL_LOG_RATIO_CLAMP`` and so was clamped inside k3 (always 0 for k1 and k2, which do not
    clamp). Pass only the trained tokens (e.g. the flat logprobs of the update) so that
    padding is not counted.

    Raises:
        KeyError: unknown name; the message lists the known names.
    """
    kl = get_kl_estimator(name)(logprobs, ref_logprobs)
    if name != "k3":
        return kl, 0
    with torch.no_grad():
        clamped = int(((ref_logprobs.float() - logprobs.float()).abs() > KL_LOG_RATIO_CLAMP).sum())
    return kl, clamped


def get_kl_estimator(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """Look up ``k1``/``k2``/``k3`` (Schulman 2020) by name.

    Raises:
        KeyError: unknown name; the message lists the known names.
    """
    try:
        return KL_ESTIMATORS[name]
    except KeyError:
        raise KeyError(
            f"unknown KL estimator {name!r}; known: {', '.join(sorted(KL_ESTIMATORS))}"
        ) from None


#: loss aggregation modes (see :func:`token_loss_weights`)
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def token_loss_weights(
    tokens_per_seq: Tensor,
    mode: str = "token-mean",
    *,
    norm_constant: float | None = None,
) -> Tensor:
    """Per-token weights w_i of each sequence so that loss = Σ_i Σ_{t ∈ i} w_i · L_{i,t}.

    With n sequences and T_i trained tokens in sequence i:

    - ``token-mean`` (DAPO, Yu et al. 2025, arXiv:2503.14476): w_i = 1 / Σ_j T_j. Every token
      weighs the same; a long sequence moves the policy more than a short one. The normaliser
      depends on the sampled lengths, so the loss scale varies a little from batch to batch.
    - ``seq-mean-token-mean`` (the original GRPO, Shao et al. 2024, arXiv:2402.03300, eq. 3):
      w_i = 1 / (n · T_i). Each sequence weighs the same, so a token of a long sequence weighs
      less: long wrong answers are penalised less per token and short right ones rewarded more
      — the length bias Liu et al. 2025 (Dr. GRPO, arXiv:2503.20783, sec. 3.1) point out.
    - ``seq-mean-token-sum`` (Dr. GRPO, arXiv:2503.20783): w_i = 1 / (n · C) for a constant C
      (e.g. the generation budget in tokens). The gradient is the unbiased sequence-level
      policy gradient scaled by 1/C: no length bias, but its size grows with the lengths.

    Args:
        tokens_per_seq: [n] trained-token counts T_i (≥ 0).
        mode: one of :data:`LOSS_AGGREGATIONS`.
        norm_constant: C (> 0), required by ``seq-mean-token-sum``.

    Returns:
        [n] float32 weights (0 for sequences without tokens under ``seq-mean-token-mean``).

    Raises:
        ValueError: unknown mode, empty input, no tokens at all, or a missing/invalid C.
    """
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(
            f"unknown loss aggregation {mode!r}; known: {', '.join(LOSS_AGGREGATIONS)}"
        )
    counts = tokens_per_seq.to(torch.float64)
    if counts.dim() != 1 or counts.numel() == 0 or bool((counts < 0).any()):
        raise ValueError(
            f"tokens_per_seq must be a non-empty 1-D count tensor, got {tokens_per_seq}"
        )
    if counts.sum() == 0:
        raise ValueError("no trained tokens to aggregate over")
    n = counts.numel()
    if mode == "token-mean":
        w = torch.full_like(counts, 1.0 / float(counts.sum()))
    elif mode == "seq-mean-token-mean":
        w = torch.where(counts > 0, 1.0 / (n * counts.clamp(min=1)), torch.zeros_like(counts))
    else:
        if norm_constant is None or not norm_constant > 0:
            raise ValueError(f"seq-mean-token-sum needs a norm_constant > 0, got {norm_constant}")
        w = torch.full_like(counts, 1.0 / (n * float(norm_constant)))
    return w.float()


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip_eps: float | None = 0.2,
    normalizer: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss of PPO (Schulman et al. 2017, arXiv:1707.06347; the clipped form of
    OpenAI baselines ``ppo2`` and Andrychowicz et al. 2021, arXiv:2006.05990, sec. 3.2):

        V_clip = V_old + clip(V − V_old, −ε, ε)
        L_t = ½ · max((V − R)², (V_clip − R)²)          (½ · (V − R)² when clip_eps is None)

    averaged over the masked positions as :func:`masked_mean` (``normalizer`` as there).

    Args:
        values: [...] current value predictions (with grad). old_values: [...] the predictions
            when the data was collected. returns: [...] targets R (e.g. GAE λ-returns).
        mask: [...] bool or 0/1 (or weights). clip_eps: ε > 0 or None (no clipping).

    Returns:
        (scalar loss, metrics ``value_clip_fraction``, ``explained_variance``
        = 1 − Var(R − V) / Var(R), the fraction of the returns' variance the values explain).

    Raises:
        ValueError: shapes differ or clip_eps ≤ 0.
    """
    for name, t in (("old_values", old_values), ("returns", returns), ("mask", mask)):
        if t.shape != values.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, values {tuple(values.shape)}")
    if clip_eps is not None and not clip_eps > 0:
        raise ValueError(f"clip_eps must be > 0 or None, got {clip_eps}")
    keep = mask != 0
    zero = torch.zeros((), dtype=torch.float32, device=values.device)
    v = torch.where(keep, values.float(), zero)
    target = torch.where(keep, returns.detach().float(), zero)
    unclipped = (v - target) ** 2
    if clip_eps is None:
        per_token = 0.5 * unclipped
        clipped_frac = 0.0
    else:
        old = torch.where(keep, old_values.detach().float(), zero)
        v_clip = old + (v - old).clamp(-clip_eps, clip_eps)
        clipped = (v_clip - target) ** 2
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        clipped_frac = masked_mean((clipped > unclipped).float(), mask).item()
    loss = masked_mean(per_token, mask, normalizer)
    with torch.no_grad():
        r = target[keep].double()
        resid = (target - v)[keep].double()
        var = r.var(unbiased=False) if r.numel() else torch.zeros(())
        explained = float(1.0 - resid.var(unbiased=False) / var) if r.numel() and var > 0 else 0.0
    return loss, {"value_clip_fraction": clipped_frac, "explained_variance": explained}
