"""Group-relative advantage estimators (credit assignment without a value model).

A *group* is the G rollouts of one task (same seed, same start). Each rollout gets one
scalar reward r_i; its advantage is measured against the other members of its group.

GRPO   (Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300, sec. 4.1.2):
           A_i = (r_i - mean_g) / (std_g + eps)
Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective",
         arXiv:2503.20783): drop the std division, which up-weights groups that are nearly
         all right or all wrong:
           A_i = r_i - mean_g
GRPO with batch-scope std (Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM
        Reasoning", arXiv:2508.08221; also the REINFORCE++-baseline normaliser): centre within the
        group, scale by the std of the whole batch, so a nearly-constant group is not blown up:
           A_i = (r_i - mean_g) / (std_batch + eps)
RLOO   (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization ...",
        arXiv:2402.14740): leave-one-out baseline, so the baseline does not depend on r_i:
           A_i = r_i - (1 / (n_g - 1)) * sum_{j in g, j != i} r_j  =  n_g/(n_g-1) * (r_i - mean_g)

Choices and deviations:
- std_g is the *population* std (unbiased=False, divide by n_g), the per-group std of the
  rewards actually observed. DeepSeekMath does not say which; TRL uses the unbiased one.
  With binary rewards the difference is a constant factor sqrt((n-1)/n) per group size.
- A group whose rewards are all equal (this includes every group of size 1) carries no
  learning signal: its advantages are set to exactly 0.0 by every estimator here, instead of
  the tiny float residue of (r - mean) or a 0/eps division. "All equal" is tested with
  min == max, not std == 0, because a float mean of equal values need not equal them.
- Rewards must be finite: a NaN reward means a failed reward function, which must be excluded
  upstream (DESIGN decision 3), so it raises here rather than poisoning the batch.
- Arithmetic runs in float64 and the result is cast back to the rewards' dtype (at least
  float32).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

__all__ = [
    "dr_grpo_advantages",
    "grpo_advantages",
    "rloo_advantages",
]


class _GroupStats:
    """Per-member group statistics of a 1-D reward tensor, computed in float64."""

    def __init__(self, rewards: Tensor, group_ids: Sequence[Hashable]) -> None:
        if rewards.dim() != 1:
            raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
        if len(group_ids) != rewards.shape[0]:
            raise ValueError(
                f"len(group_ids)={len(group_ids)} != number of rewards {rewards.shape[0]}"
            )
        if not torch.is_floating_point(rewards):
            raise TypeError(f"rewards must be a float tensor, got {rewards.dtype}")
        if not bool(torch.isfinite(rewards).all()):
            raise ValueError("rewards contain NaN or inf; exclude failed trajectories first")
        index_of: dict[Hashable, int] = {}
        idx = [index_of.setdefault(g, len(index_of)) for g in group_ids]
        n_groups = len(index_of)
        self.out_dtype = torch.promote_types(rewards.dtype, torch.float32)
        r = rewards.detach().to(torch.float64)
        index = torch.tensor(idx, dtype=torch.long, device=r.device)
        zeros = torch.zeros(n_groups, dtype=torch.float64, device=r.device)
        count = zeros.index_add(0, index, torch.ones_like(r))
        total = zeros.index_add(0, index, r)
        mean = total / count
        sq_dev = zeros.index_add(0, index, (r - mean[index]) ** 2)
        gmin = zeros.scatter_reduce(0, index, r, reduce="amin", include_self=False)
        gmax = zeros.scatter_reduce(0, index, r, reduce="amax", include_self=False)
        self.r = r
        self.count = count[index]  # [N] size of i's group
        self.total = total[index]  # [N] sum of i's group
        self.mean = mean[index]  # [N] mean of i's group
        self.std = (sq_dev / count).sqrt()[index]  # [N] population std of i's group
        self.constant = (gmin == gmax)[index]  # [N] True where i's group has one value

    def finish(self, adv: Tensor) -> Tensor:
        """Zero out constant groups exactly and cast to the output dtype."""
        adv = torch.where(self.constant, torch.zeros_like(adv), adv)
        return adv.to(self.out_dtype)


def grpo_advantages(
    rewards: Tensor,
    group_ids: Sequence[Hashable],
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
    std_scope: str = "group",
) -> Tensor:
    """GRPO group-normalised advantages (Shao et al. 2024, arXiv:2402.03300).

    A_i = (r_i - mean_g) / (std_g + eps), mean and population std (unbiased=False) over the
    members of i's group g. With ``std_scope="batch"`` the divisor is the population std of all
    N rewards instead (group mean, batch std; arXiv:2508.08221). With ``normalize_std=False``
    this is Dr. GRPO (Liu et al. 2025): A_i = r_i - mean_g. Groups whose rewards are all equal
    (including size-1 groups) get exactly 0.0.

    Args:
        rewards: [N] float, one scalar reward per trajectory.
        group_ids: length N, any hashable; equal ids form one group (order irrelevant).
        normalize_std: divide by the group std (GRPO) or not (Dr. GRPO).
        eps: added to the std before dividing.
        std_scope: ``"group"`` (std of i's group) or ``"batch"`` (std of all N rewards).

    Returns:
        [N] advantages, dtype of ``rewards`` (at least float32), no grad.

    Raises:
        ValueError: bad shapes, non-finite rewards, or an unknown ``std_scope``.
    """
    if std_scope not in ("group", "batch"):
        raise ValueError(f"std_scope must be 'group' or 'batch', got {std_scope!r}")
    s = _GroupStats(rewards, group_ids)
    adv = s.r - s.mean
    if normalize_std:
        std = s.std if std_scope == "group" else s.r.std(unbiased=False).expand_as(s.r)
        adv = adv / (std + eps)
    return s.finish(adv)


def dr_grpo_advantages(rewards: Tensor, group_ids: Sequence[Hashable]) -> Tensor:
    """Dr. GRPO advantages (Liu et al. 2025, arXiv:2503.20783): A_i = r_i - mean_g.

    Same as ``grpo_advantages(rewards, group_ids, normalize_std=False)``.
    Shapes: rewards [N] float, group_ids length N -> [N].
    """
    return grpo_advantages(rewards, group_ids, normalize_std=False)


def rloo_advantages(rewards: Tensor, group_ids: Sequence[Hashable]) -> Tensor:
    """RLOO leave-one-out advantages (Ahmadian et al. 2024, arXiv:2402.14740).

    A_i = r_i - (sum_g - r_i) / (n_g - 1): the baseline is the mean of the *other* members
    of i's group. Size-1 groups and all-equal groups get exactly 0.0.

    Args:
        rewards: [N] float. group_ids: length N, hashable group keys.

    Returns:
        [N] advantages, dtype of ``rewards`` (at least float32), no grad.
    """
    s = _GroupStats(rewards, group_ids)
    others = (s.count - 1).clamp(min=1)  # size-1 groups are zeroed by finish()
    adv = s.r - (s.total - s.r) / others
    return s.finish(adv)
