"""Discounted returns, GAE(λ) and REINFORCE++ over masked step sequences (tokens or turns).

Every function here works on a padded batch ``[N, L]`` with a ``mask`` saying which positions
are *steps*. The same function serves two granularities:

- token level: L = tokens of the stream, mask = loss mask (1 = a token the policy sampled).
  Tool outputs and environment text in the middle of a sequence have mask 0: they are *not*
  steps, they are skipped (not discounted over, given output 0), and the step after them
  continues the recursion, so tokens after a masked tool-output span get the right return;
- turn level: L = turns, mask = 1 for the turns a trajectory has (padding 0).

Formulas (Sutton & Barto 2018, ch. 3 and 12; GAE: Schulman et al. 2016, "High-Dimensional
Continuous Control Using Generalized Advantage Estimation", arXiv:1506.02438, eq. 16), over
the steps t < t' < ... of one row, in order:

    G_t = r_t + γ · G_{t'},                       G after the last step = V_boot
    δ_t = r_t + γ · V_{t'} − V_t,                 V after the last step = V_boot
    A_t = δ_t + γλ · A_{t'},                      A after the last step = 0
    V_boot = 0 if the episode terminated, else bootstrap_values[i] (truncated: a budget ran out)

The λ-return target of the value function is R_t = A_t + V_t.

REINFORCE++ (Hu et al. 2025, "REINFORCE++: An Efficient RLHF Algorithm with Robustness to
Both Prompt and Reward Models", arXiv:2501.03262): token returns of (outcome reward at the last
step + per-token rewards such as −β·KL), then normalised over *all* steps of the batch,
A = (G − mean_batch) / (std_batch + eps). Its "baseline" variant first subtracts the group
mean of the outcome rewards (REINFORCE++-baseline, same paper, v3+).

Choices: arithmetic in float64, cast back to the rewards' dtype (at least float32). Rewards on
positions with mask 0 are rejected (place a reward on the step that earned it). Values on
mask-0 positions are ignored (they may hold anything, NaN included). Outputs are 0 there.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from agentic_rl.algorithms.advantages import _GroupStats

__all__ = [
    "discounted_returns",
    "gae_advantages",
    "masked_whiten",
    "reinforce_pp_advantages",
]


def _prepare(
    rewards: Tensor, mask: Tensor | None, terminated, bootstrap_values
) -> tuple[Tensor, Tensor, Tensor]:
    """Validate; return float64 rewards, bool mask and the per-row value after the last step."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be 2-D [N, L], got shape {tuple(rewards.shape)}")
    n = rewards.shape[0]
    mask = torch.ones_like(rewards, dtype=torch.bool) if mask is None else mask
    if mask.shape != rewards.shape:
        raise ValueError(
            f"mask {tuple(mask.shape)} and rewards {tuple(rewards.shape)} differ in shape"
        )
    keep = mask != 0
    r = rewards.detach().to(torch.float64)
    if not bool(torch.isfinite(r[keep]).all()):
        raise ValueError("rewards contain NaN or inf at step positions")
    if bool((torch.where(keep, torch.zeros_like(r), r) != 0).any()):
        raise ValueError("rewards must be 0 where mask is 0 (a reward belongs to a step)")
    r = torch.where(keep, r, torch.zeros_like(r))
    term = (
        torch.ones(n, dtype=torch.bool, device=r.device)
        if terminated is None
        else torch.as_tensor(terminated, dtype=torch.bool, device=r.device)
    )
    boot = (
        torch.zeros(n, dtype=torch.float64, device=r.device)
        if bootstrap_values is None
        else torch.as_tensor(bootstrap_values, dtype=torch.float64, device=r.device)
    )
    if term.shape != (n,) or boot.shape != (n,):
        raise ValueError(f"terminated and bootstrap_values must have shape [{n}]")
    if not bool(term.all()) and bootstrap_values is None:
        raise ValueError(
            "truncated rows need bootstrap_values (the value of the state after the last step)"
        )
    after = torch.where(term, torch.zeros_like(boot), boot.detach())
    if not bool(torch.isfinite(after).all()):
        raise ValueError("bootstrap_values of truncated rows must be finite")
    return r, keep, after


def discounted_returns(
    rewards: Tensor,
    mask: Tensor | None = None,
    *,
    gamma: float = 1.0,
    terminated: Tensor | Sequence[bool] | None = None,
    bootstrap_values: Tensor | Sequence[float] | None = None,
) -> Tensor:
    """Discounted return-to-go G_t = r_t + γ·G_{next step}, per row, over the steps in ``mask``.

    Per token (mask = loss mask; tool-output spans are skipped) or per turn (mask = valid turns).
    After the last step of row i the return is 0 if ``terminated[i]`` (the default), else
    ``bootstrap_values[i]`` (a truncated episode: the estimated value of where it stopped).

    Example: γ = 0.5, rewards [0, 0, 0, 1] over 4 turns → G = [0.125, 0.25, 0.5, 1].

    Args:
        rewards: [N, L] float; must be 0 where ``mask`` is 0.
        mask: [N, L] bool or 0/1, 1 = a step (None: all steps).
        gamma: discount γ in [0, 1].
        terminated: [N] bool (None: all terminated).
        bootstrap_values: [N] float, used for rows with ``terminated`` False.

    Returns:
        [N, L] returns in the rewards' dtype (at least float32), 0 at mask-0 positions, no grad.

    Raises:
        ValueError: bad shapes, γ outside [0, 1], non-finite rewards, a reward at a mask-0
            position, or a truncated row without a bootstrap value.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    r, keep, carry = _prepare(rewards, mask, terminated, bootstrap_values)
    out = torch.zeros_like(r)
    for t in range(r.shape[1] - 1, -1, -1):
        step = keep[:, t]
        carry = torch.where(step, r[:, t] + gamma * carry, carry)
        out[:, t] = torch.where(step, carry, torch.zeros_like(carry))
    return out.to(torch.promote_types(rewards.dtype, torch.float32))


def gae_advantages(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor | None = None,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
    terminated: Tensor | Sequence[bool] | None = None,
    bootstrap_values: Tensor | Sequence[float] | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv:1506.02438, eq. 16).

    δ_t = r_t + γ·V_{next} − V_t and A_t = δ_t + γλ·A_{next}, where "next" is the next step of
    the row (mask-0 positions such as a tool-output span are skipped). After the last step,
    V = 0 when the episode terminated and V = ``bootstrap_values[i]`` when it was truncated.
    λ = 1 gives A_t = G_t − V_t (Monte Carlo); λ = 0 gives the one-step TD error.
    Works per token or per turn (see the module docstring).

    Args:
        rewards: [N, L] float, 0 where ``mask`` is 0.
        values: [N, L] V(s_t) at each step (ignored where ``mask`` is 0; detached).
        mask: [N, L] 1 = a step (None: all).
        gamma, lam: γ and λ in [0, 1].
        terminated: [N] bool (None: all terminated). bootstrap_values: [N] for truncated rows.

    Returns:
        (advantages [N, L], returns [N, L]) with returns = advantages + values (the λ-return,
        the value-function target); both 0 at mask-0 positions, no grad, rewards' dtype.

    Raises:
        ValueError: as :func:`discounted_returns`, plus a shape mismatch of ``values``,
            non-finite values at steps, or λ outside [0, 1].
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must be in [0, 1], got {gamma}, {lam}")
    if values.shape != rewards.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and rewards {tuple(rewards.shape)} differ in shape"
        )
    r, keep, next_v = _prepare(rewards, mask, terminated, bootstrap_values)
    v = torch.where(keep, values.detach().to(torch.float64), torch.zeros_like(r))
    if not bool(torch.isfinite(v).all()):
        raise ValueError("values contain NaN or inf at step positions")
    adv = torch.zeros_like(r)
    next_a = torch.zeros_like(next_v)
    for t in range(r.shape[1] - 1, -1, -1):
        step = keep[:, t]
        a = r[:, t] + gamma * next_v - v[:, t] + gamma * lam * next_a
        adv[:, t] = torch.where(step, a, torch.zeros_like(a))
        next_v = torch.where(step, v[:, t], next_v)
        next_a = torch.where(step, a, next_a)
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    returns = torch.where(keep, adv + v, torch.zeros_like(adv))
    return adv.to(dtype), returns.to(dtype)


def masked_whiten(x: Tensor, mask: Tensor, *, eps: float = 1e-8, shift_mean: bool = True) -> Tensor:
    """(x − mean) / (std + eps) over the positions where ``mask`` is non-zero; 0 elsewhere.

    mean and population std over all masked positions of the batch (token-weighted). When all
    masked values are equal the result is exactly 0 (no 0/eps residue).

    Args:
        x: any shape. mask: same shape. shift_mean: False scales without centring.

    Returns:
        tensor like ``x`` (at least float32), no grad.
    """
    if x.shape != mask.shape:
        raise ValueError(f"x {tuple(x.shape)} and mask {tuple(mask.shape)} differ in shape")
    keep = mask != 0
    vals = x.detach().to(torch.float64)[keep]
    out = torch.zeros_like(x, dtype=torch.float64)
    if vals.numel() == 0 or bool(vals.min() == vals.max()):
        return out.to(torch.promote_types(x.dtype, torch.float32))
    mean = vals.mean()
    std = vals.std(unbiased=False)
    centred = x.detach().to(torch.float64) - (mean if shift_mean else 0.0)
    out = torch.where(keep, centred / (std + eps), out)
    return out.to(torch.promote_types(x.dtype, torch.float32))


def reinforce_pp_advantages(
    outcome_rewards: Tensor,
    mask: Tensor,
    *,
    token_rewards: Tensor | None = None,
    group_ids: Sequence[Hashable] | None = None,
    gamma: float = 1.0,
    eps: float = 1e-8,
) -> Tensor:
    """REINFORCE++ advantages (Hu et al. 2025, arXiv:2501.03262), batch-normalised.

    r_{i,t} = token_rewards[i, t] + 1[t = last step of i] · r̃_i, with r̃_i = r_i (REINFORCE++)
    or r̃_i = r_i − mean_g(r) when ``group_ids`` are given (REINFORCE++-baseline);
    G = discounted_returns(r, mask, γ);  A = (G − mean_batch(G)) / (std_batch(G) + eps), the
    mean and std taken over every step (token) of the batch. A batch whose returns are all
    equal gets exactly 0.

    Args:
        outcome_rewards: [N] trajectory rewards. mask: [N, L] steps (loss mask).
        token_rewards: [N, L] extra per-step rewards (e.g. −β·KL), 0 off-mask; None = none.
        group_ids: length N for the baseline variant; None for plain REINFORCE++.
        gamma: discount. eps: added to the batch std.

    Returns:
        [N, L] advantages (at least float32), 0 off-mask, no grad.

    Raises:
        ValueError: bad shapes, a row without any step, or non-finite rewards.
    """
    if outcome_rewards.dim() != 1 or mask.dim() != 2 or mask.shape[0] != outcome_rewards.shape[0]:
        raise ValueError(
            f"expected outcome_rewards [N] and mask [N, L], got {tuple(outcome_rewards.shape)} "
            f"and {tuple(mask.shape)}"
        )
    keep = mask != 0
    if not bool(keep.any(dim=1).all()):
        raise ValueError("every row needs at least one step (mask 1)")
    r = outcome_rewards.detach().to(torch.float64)
    if group_ids is not None:
        stats = _GroupStats(r, group_ids)
        r = stats.r - stats.mean
    elif not bool(torch.isfinite(r).all()):
        raise ValueError("outcome_rewards contain NaN or inf")
    last = (
        keep.shape[1] - 1 - keep.flip(1).long().argmax(dim=1)
    )  # [N] index of each row's last step
    dense = torch.zeros(keep.shape, dtype=torch.float64, device=r.device)
    dense[torch.arange(keep.shape[0], device=r.device), last] = r
    if token_rewards is not None:
        if token_rewards.shape != mask.shape:
            raise ValueError(
                f"token_rewards {tuple(token_rewards.shape)} and mask {tuple(mask.shape)} differ"
            )
        dense = dense + token_rewards.detach().to(torch.float64)
    returns = discounted_returns(dense, keep, gamma=gamma)
    out = masked_whiten(returns, keep, eps=eps)
    return out.to(torch.promote_types(outcome_rewards.dtype, torch.float32))
