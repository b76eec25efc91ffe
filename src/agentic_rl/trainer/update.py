"""One optimizer step: supervised (warm-up) or policy-gradient (PPO-clip / GRPO).

Both steps run over micro-batches of trajectories (gradient accumulation) and normalise by the
number of trained tokens of the *whole* step, so the result is one global token-mean whatever
the micro-batch size (DAPO's token-mean, Yu et al. 2025, arXiv:2503.14476).

Policy-gradient loss per trained token (Schulman et al. 2017, arXiv:1707.06347; GRPO, Shao et
al. 2024, arXiv:2402.03300)::

    L = −min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A) + β · k3(π_θ, π_ref),   ρ = exp(logp − old_logp)

``old_logp`` is the logprob recorded at sampling (the behaviour policy), so ρ corrects any
mismatch between the sampler and the trainer; ``train/logprob_diff`` logs that mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentic_rl.algorithms import kl_k3, ppo_clip_loss
from agentic_rl.trainer.scoring import pack, score
from agentic_rl.types import Trajectory


def _chunks(items: Sequence, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _finish_step(model, optimizer, max_grad_norm: float) -> float:
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


def sft_update(model, optimizer, demos: Sequence[Trajectory], *, micro_batch_size: int, max_grad_norm: float = 1.0) -> dict[str, float]:
    """One supervised step: maximise the logprob of the sampled (loss-mask 1) tokens of ``demos``.

    Returns:
        metrics ``train/loss`` (mean negative log-likelihood per trained token),
        ``train/grad_norm``, ``train/tokens``.

    Raises:
        ValueError: no trained token in ``demos``.
    """
    total = sum(max(sum(t.loss_mask[1:]), 0) for t in demos)
    if total == 0:
        raise ValueError("sft_update: the demonstrations have no trained tokens")
    model.train()
    loss_sum = 0.0
    for mb in _chunks(demos, micro_batch_size):
        batch = pack(mb, _device(model))
        logprobs, _ = score(model, batch)
        loss = -logprobs.sum() / total
        loss.backward()
        loss_sum += loss.item() * total
    grad_norm = _finish_step(model, optimizer, max_grad_norm)
    return {"train/loss": loss_sum / total, "train/grad_norm": grad_norm, "train/tokens": float(total)}


def policy_gradient_update(
    model,
    optimizer,
    trajectories: Sequence[Trajectory],
    advantages: Sequence[float],
    *,
    micro_batch_size: int,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    kl_coef: float = 0.0,
    ref_model=None,
    temperature: float = 1.0,
    max_grad_norm: float = 1.0,
) -> dict[str, float]:
    """One PPO-clip step on ``trajectories`` with one advantage per trajectory (broadcast to its tokens).

    Args:
        trajectories: scored, non-failed trajectories (token streams with old logprobs).
        advantages: A_i per trajectory (same length as ``trajectories``).
        kl_coef: β; needs ``ref_model`` when > 0.
        temperature: sampling temperature of the rollouts (logits are divided by it).

    Returns:
        metrics ``train/loss``, ``train/kl`` (k3, mean per token; 0 without reference),
        ``train/clip_fraction``, ``train/ratio_mean``, ``train/entropy``, ``train/logprob_diff``
        (mean |logp_train − logp_sampled|), ``train/grad_norm``, ``train/tokens``.

    Raises:
        ValueError: lengths differ, no trained token, or ``kl_coef > 0`` without ``ref_model``.
    """
    if len(trajectories) != len(advantages):
        raise ValueError("one advantage per trajectory is required")
    if kl_coef > 0 and ref_model is None:
        raise ValueError("kl_coef > 0 needs a reference model")
    total = sum(sum(t.loss_mask[1:]) for t in trajectories)
    if total == 0:
        raise ValueError("policy_gradient_update: no trained tokens")
    model.train()
    sums = dict.fromkeys(["loss", "kl", "clip_fraction", "ratio_mean", "entropy", "logprob_diff"], 0.0)
    order = sorted(range(len(trajectories)), key=lambda i: len(trajectories[i].token_ids))  # less padding
    for idx in _chunks(order, micro_batch_size):
        batch = pack([trajectories[i] for i in idx], _device(model))
        n = batch.num_tokens
        if n == 0:
            continue
        adv = torch.tensor([float(advantages[i]) for i in idx], device=batch.rows.device)[batch.rows]
        logprobs, entropy = score(model, batch, temperature=temperature, with_entropy=True)
        ones = torch.ones_like(logprobs)
        loss, m = ppo_clip_loss(
            logprobs, batch.old_logprobs, adv, ones, clip_eps_low=clip_eps_low, clip_eps_high=clip_eps_high, normalizer=total
        )
        kl_sum = 0.0
        if ref_model is not None:
            with torch.no_grad():
                ref_logprobs, _ = score(ref_model, batch, temperature=temperature)
            kl = kl_k3(logprobs, ref_logprobs)
            if kl_coef > 0:
                loss = loss + kl_coef * kl.sum() / total
            kl_sum = float(kl.detach().sum())
        loss.backward()
        sums["loss"] += loss.item() * total
        sums["kl"] += kl_sum
        sums["clip_fraction"] += m["clip_fraction"] * n
        sums["ratio_mean"] += m["ratio_mean"] * n
        sums["entropy"] += float(entropy.sum())
        sums["logprob_diff"] += float((logprobs.detach() - batch.old_logprobs).abs().sum())
    grad_norm = _finish_step(model, optimizer, max_grad_norm)
    out = {f"train/{k}": v / total for k, v in sums.items()}
    out.update({"train/grad_norm": grad_norm, "train/tokens": float(total)})
    return out
