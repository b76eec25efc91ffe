"""Turn-level (step-level) credit assignment for multi-turn agents.

Inputs are padded per-turn tensors ``[N, K]`` (N trajectories, K = most turns in the batch)
with a ``turn_mask`` (1 = the trajectory has this turn). The trainer spreads a turn's advantage
over that turn's sampled tokens (``spread_over_turns`` in the trainer's credit module).

GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
arXiv:2505.10978, sec. 3):
    episode level:  A^E_i = (R_i − mean_g R) / F,        R_i = the trajectory's return
    step level:     steps (i, k) of one group g whose anchor observations s_{i,k} are identical
                    form a step group S; with the discounted return R_{i,k} = Σ_{j≥k} γ^{j−k} r_{i,j},
                    A^S_{i,k} = (R_{i,k} − mean_S R) / F
    combined:       A_{i,k} = A^E_i + ω · A^S_{i,k}
    F = std (+eps) of the group (or 1 with normalize_std=False). A step group of one step, or
    one whose returns are all equal, gives A^S = 0 exactly (no extra signal).

Turn-level process credit ("turn_grpo"), after PRIME (Cui et al. 2025, "Process Reinforcement
through Implicit Rewards", arXiv:2502.01456, eq. 6), which adds the return of group-normalised
process rewards to the outcome advantage:
    p̃_{i,k} = (p_{i,k} − mean_g p) / (std_g p + eps)      over all turns of all members of g
    A_{i,k} = A^O_i + c · Σ_{j≥k} γ^{j−k} p̃_{i,j}          A^O = GRPO advantage of the outcome
Deviation from PRIME: the process rewards are the env's per-turn process signals (not an
implicit PRM), normalised with GRPO's mean/std instead of RLOO.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from agentic_rl.algorithms.advantages import _GroupStats, grpo_advantages
from agentic_rl.algorithms.returns import discounted_returns

__all__ = ["gigpo_advantages", "turn_process_advantages"]


def _check_turns(name: str, x: Tensor, turn_mask: Tensor, n: int) -> Tensor:
    if x.dim() != 2 or x.shape != turn_mask.shape or x.shape[0] != n:
        raise ValueError(
            f"{name} {tuple(x.shape)} and turn_mask {tuple(turn_mask.shape)} must both be [N={n}, K]"
        )
    keep = turn_mask != 0
    if not bool(torch.isfinite(x.detach().double()[keep]).all()):
        raise ValueError(f"{name} contain NaN or inf")
    return keep


def gigpo_advantages(
    episode_rewards: Tensor,
    group_ids: Sequence[Hashable],
    step_rewards: Tensor,
    turn_mask: Tensor,
    anchor_keys: Sequence[Sequence[Hashable]],
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO per-turn advantages (Feng et al. 2025, arXiv:2505.10978); formula in the module doc.

    Args:
        episode_rewards: [N] trajectory returns R_i (episode-level groups).
        group_ids: length N; equal ids = the G rollouts of one task.
        step_rewards: [N, K] per-turn rewards r_{i,k} (0 on padding).
        turn_mask: [N, K] 1 where trajectory i has turn k.
        anchor_keys: N sequences, ``anchor_keys[i][k]`` a hashable key of the observation that
            turn k of trajectory i acted on (only the first ``sum(turn_mask[i])`` are read).
            Equal keys within one group form a step group.
        gamma: γ of the step returns. step_weight: ω. normalize_std: divide by the std (F).
        eps: added to the std.

    Returns:
        [N, K] advantages (at least float32), 0 on padding, no grad.

    Raises:
        ValueError: shapes or lengths disagree, non-finite rewards, or turn_mask not left-aligned.
    """
    n = episode_rewards.shape[0]
    keep = _check_turns("step_rewards", step_rewards, turn_mask, n)
    counts = keep.sum(dim=1).tolist()
    if not bool(
        (
            keep == (torch.arange(keep.shape[1], device=keep.device) < keep.sum(1, keepdim=True))
        ).all()
    ):
        raise ValueError("turn_mask must be left-aligned (turns 0..K_i-1 of each row)")
    if len(anchor_keys) != n or any(len(anchor_keys[i]) < counts[i] for i in range(n)):
        raise ValueError("anchor_keys needs one key per turn of each trajectory")
    episode = grpo_advantages(
        episode_rewards, group_ids, normalize_std=normalize_std, eps=eps
    ).double()
    returns = discounted_returns(step_rewards.double(), keep, gamma=gamma)  # [N, K] R_{i,k}
    rows, cols = keep.nonzero(as_tuple=True)
    step = torch.zeros_like(returns)
    if rows.numel():
        keys = [(group_ids[i], anchor_keys[i][k]) for i, k in zip(rows.tolist(), cols.tolist())]
        step_adv = grpo_advantages(returns[rows, cols], keys, normalize_std=normalize_std, eps=eps)
        step[rows, cols] = step_adv.double()
    out = torch.where(keep, episode[:, None] + step_weight * step, torch.zeros_like(step))
    return out.to(torch.promote_types(episode_rewards.dtype, torch.float32))


def turn_process_advantages(
    outcome_rewards: Tensor,
    group_ids: Sequence[Hashable],
    process_rewards: Tensor,
    turn_mask: Tensor,
    *,
    gamma: float = 1.0,
    process_coef: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Outcome advantage plus the return of group-normalised per-turn process rewards (PRIME-style).

    A_{i,k} = A^O_i + c · Σ_{j≥k} γ^{j−k} p̃_{i,j}; see the module docstring. A group whose
    process rewards are all equal contributes only its outcome advantage; a group whose outcome
    rewards are also equal gets exactly 0.

    Args:
        outcome_rewards: [N] trajectory rewards (GRPO within groups).
        group_ids: length N.
        process_rewards: [N, K] per-turn process rewards p_{i,k} (0 on padding).
        turn_mask: [N, K] 1 where trajectory i has turn k.
        gamma: γ of the process returns. process_coef: c. normalize_std, eps: as GRPO.

    Returns:
        [N, K] advantages (at least float32), 0 on padding, no grad.

    Raises:
        ValueError: bad shapes or non-finite rewards.
    """
    n = outcome_rewards.shape[0]
    keep = _check_turns("process_rewards", process_rewards, turn_mask, n)
    outcome = grpo_advantages(
        outcome_rewards, group_ids, normalize_std=normalize_std, eps=eps
    ).double()
    rows, cols = keep.nonzero(as_tuple=True)
    normed = torch.zeros(keep.shape, dtype=torch.float64, device=keep.device)
    if rows.numel():
        flat = process_rewards.detach().double()[rows, cols]
        stats = _GroupStats(flat, [group_ids[i] for i in rows.tolist()])
        adv = stats.r - stats.mean
        if normalize_std:
            adv = adv / (stats.std + eps)
        normed[rows, cols] = stats.finish(adv).double()
    process_returns = discounted_returns(normed, keep, gamma=gamma)
    out = torch.where(
        keep, outcome[:, None] + process_coef * process_returns, torch.zeros_like(normed)
    )
    return out.to(torch.promote_types(outcome_rewards.dtype, torch.float32))
