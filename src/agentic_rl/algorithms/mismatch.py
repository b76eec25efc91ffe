"""Sampler/trainer mismatch correction: truncated and masked importance sampling, mismatch KL.

The rollouts are sampled by a policy μ (a bf16 sampler, a vLLM or other inference server) that
is not exactly the trainer's policy π even at the same weights: kernels, precision and batch
composition differ. With π_old the trainer's own policy at the weights that sampled (a no-grad
forward before the update), the PPO ratio is taken against π_old and the sample is reweighted
from μ to π_old per token, with the ratio r_t = π_old(y_t) / μ(y_t) = exp(logπ_old − logμ):

- **Truncated importance sampling (TIS)** (Yao et al. 2025, "Your Efficient RL Framework
  Secretly Brings You Off-Policy RL Training", https://fengyao.notion.site/off-policy-rl):
  w_t = min(r_t, C), detached; the per-token policy-gradient loss is multiplied by w_t. The cap
  C bounds the variance a token the sampler found much less likely than the trainer can add.
- **Masked importance sampling (MIS)** (IcePop, inclusionAI's Ring/Ling team, 2025; the
  masked variant of Yao et al.'s TIS): tokens whose r_t lies outside [low, high] get weight 0
  (they drop out of the loss) instead of a capped weight. At the ``sequence`` level the whole
  sequence drops out when its geometric mean ratio exp(mean_t(logπ_old − logμ)) over its
  loss-masked tokens leaves [low, high].
- **Mismatch KL**: the k3 estimate (Schulman 2020, http://joschu.net/blog/kl-approx.html) of
  KL(μ‖π) from tokens sampled by μ: with r = π/μ, k3 = r − 1 − log r ≥ 0 and E_μ[k3] = KL(μ‖π).
  It is 0 exactly when the two agree on every sampled token.

All functions take [B, T] tensors aligned token for token (a padded batch; ``mask`` marks the
trained tokens) and return detached values: the corrections are constants of the loss, as in
Yao et al. Log-ratios are computed in float64 on masked tokens only, so garbage at padding
(NaN, −inf) never reaches an exp.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["MIS_LEVELS", "masked_is", "mismatch_kl", "truncated_is_weights"]

#: levels of :func:`masked_is`
MIS_LEVELS = ("token", "sequence")


def _check_shapes(**tensors: Tensor) -> None:
    """All tensors [B, T] of the same shape.

    Raises:
        ValueError: a tensor is not 2-D or shapes differ (names them).
    """
    items = list(tensors.items())
    name0, t0 = items[0]
    if t0.dim() != 2:
        raise ValueError(f"{name0} must be [B, T], got shape {tuple(t0.shape)}")
    for name, t in items[1:]:
        if t.shape != t0.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, {name0} has {tuple(t0.shape)}")


def _log_ratio(trainer_logprobs: Tensor, sampler_logprobs: Tensor, keep: Tensor | None) -> Tensor:
    """[B, T] float64 logπ − logμ, 0 where ``keep`` is False (when given)."""
    d = trainer_logprobs.detach().double() - sampler_logprobs.detach().double()
    if keep is None:
        return d
    return torch.where(keep, d, torch.zeros_like(d))


def truncated_is_weights(trainer_logprobs: Tensor, sampler_logprobs: Tensor, cap: float) -> Tensor:
    """Truncated importance-sampling weights w_t = min(exp(logπ_t − logμ_t), cap) (TIS).

    Args:
        trainer_logprobs: [B, T] logπ_old of each token under the trainer (nats).
        sampler_logprobs: [B, T] logμ of the same tokens, recorded by the sampler.
        cap: C > 0 (Yao et al. use 2); weights above it are set to C.

    Returns:
        [B, T] float32 weights in (0, cap], detached (no gradient flows through them).
        Padding positions get whatever their inputs give; mask them in the loss.

    Raises:
        ValueError: shapes differ or are not 2-D; ``cap`` <= 0 or not finite.
    """
    _check_shapes(trainer_logprobs=trainer_logprobs, sampler_logprobs=sampler_logprobs)
    if not (cap > 0 and cap < float("inf")):
        raise ValueError(f"truncated_is_weights: cap must be finite and > 0, got {cap}")
    d = _log_ratio(trainer_logprobs, sampler_logprobs, None)
    # min(exp(d), C) = exp(min(d, log C)): no overflow for a huge d
    return torch.exp(d.clamp(max=float(torch.log(torch.tensor(float(cap)))))).float()


def masked_is(
    trainer_logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    low: float,
    high: float,
    level: str = "token",
) -> Tensor:
    """Masked importance sampling (MIS / IcePop): 1 for tokens kept, 0 for tokens dropped.

    ``token``: token t is kept when low <= exp(logπ_t − logμ_t) <= high. ``sequence``: every
    token of row b is kept when low <= exp(mean over the row's masked tokens of (logπ − logμ))
    <= high (the geometric mean ratio); a row with no masked token is kept (it trains nothing).

    Args:
        trainer_logprobs: [B, T] logπ_old per token (nats). sampler_logprobs: [B, T] logμ.
        mask: [B, T] bool or 0/1, the trained tokens; the result is 0 wherever it is 0.
        low, high: the kept ratio range, 0 <= low <= 1 <= high.
        level: ``"token"`` or ``"sequence"``.

    Returns:
        [B, T] float32 of 0/1, detached.

    Raises:
        ValueError: shapes differ or are not 2-D; ``low``/``high`` outside the rule above (or
            not finite); unknown ``level``.
    """
    _check_shapes(trainer_logprobs=trainer_logprobs, sampler_logprobs=sampler_logprobs, mask=mask)
    if not (0.0 <= low <= 1.0 <= high < float("inf")):
        raise ValueError(f"masked_is: need 0 <= low <= 1 <= high < inf, got low={low}, high={high}")
    if level not in MIS_LEVELS:
        raise ValueError(f"masked_is: level must be one of {', '.join(MIS_LEVELS)}, got {level!r}")
    keep = mask != 0
    d = _log_ratio(trainer_logprobs, sampler_logprobs, keep)
    log_low = torch.log(torch.tensor(float(low), dtype=torch.float64))  # -inf for low = 0
    log_high = torch.log(torch.tensor(float(high), dtype=torch.float64))
    if level == "sequence":
        counts = keep.sum(dim=1, keepdim=True)
        mean = d.sum(dim=1, keepdim=True) / counts.clamp(min=1)
        inside = ((mean >= log_low) & (mean <= log_high)) | (counts == 0)
        inside = inside.expand_as(keep)
    else:
        inside = (d >= log_low) & (d <= log_high)
    return (inside & keep).float()


def mismatch_kl(trainer_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor) -> Tensor:
    """k3 estimate of KL(μ‖π) over the masked tokens, from tokens sampled by μ.

    With d_t = logπ_t − logμ_t: k3_t = exp(d_t) − 1 − d_t (≥ 0, unbiased: E_μ[e^d − 1] = 0 and
    E_μ[−d] = KL(μ‖π)); the result is the mean of k3_t over tokens with ``mask`` != 0
    (Schulman 2020). 0 when no token is masked.

    Args:
        trainer_logprobs: [B, T] logπ per token (nats). sampler_logprobs: [B, T] logμ.
        mask: [B, T] bool or 0/1, the trained tokens.

    Returns:
        a scalar float64 tensor (nats), detached.

    Raises:
        ValueError: shapes differ or are not 2-D.
    """
    _check_shapes(trainer_logprobs=trainer_logprobs, sampler_logprobs=sampler_logprobs, mask=mask)
    keep = mask != 0
    d = _log_ratio(trainer_logprobs, sampler_logprobs, keep)
    k3 = torch.where(keep, torch.expm1(d) - d, torch.zeros_like(d))
    return k3.sum() / keep.sum().clamp(min=1)
