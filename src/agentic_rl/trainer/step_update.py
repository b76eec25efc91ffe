"""The policy update of one RL step: credit assignment, then PPO epochs over minibatches.

:func:`credit_and_update` assigns credit once over the step's valid trajectories
(``algorithm.name``, :mod:`agentic_rl.trainer.credit`), keeps those that carry a gradient,
cuts them into minibatches of whole groups and takes one PPO-clip step per minibatch and epoch
(:func:`~agentic_rl.trainer.update.policy_gradient_update`). With the sampler/trainer mismatch
correction on (``[loss] tis_cap``/``mis_*``), π_old is scored once, before the step's first
optimizer step, and every optimizer step of the RL step uses it
(:mod:`agentic_rl.trainer.mismatch_correction`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from agentic_rl.config import TrainConfig
from agentic_rl.trainer.credit import assign_credit, turn_means
from agentic_rl.trainer.mismatch_correction import correction_on, old_policy_logprobs
from agentic_rl.trainer.mixture_steps import scale_rewards
from agentic_rl.trainer.run import Run, loss_settings
from agentic_rl.trainer.update import policy_gradient_update
from agentic_rl.types import Trajectory

__all__ = ["credit_and_update"]


def _minibatch_split(trajs: list[Trajectory], keep: list[int], parts: int) -> list[list[int]]:
    """``keep`` cut into at most ``parts`` minibatches of whole groups (in order, near-equal group counts)."""
    groups = list(dict.fromkeys(trajs[i].group_id for i in keep))
    parts = max(1, min(parts, len(groups)))
    bounds = [round(k * len(groups) / parts) for k in range(parts + 1)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        members = set(groups[a:b])
        out.append([i for i in keep if trajs[i].group_id in members])
    return [m for m in out if m]


def _mean_stats(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the optimizer steps of one RL step (``train/tokens`` summed)."""
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for r in rows for k in r):
        values = [r[key] for r in rows if key in r]
        out[key] = sum(values) if key == "train/tokens" else sum(values) / len(values)
    return out


def credit_and_update(
    run: Run, optimizer: torch.optim.Optimizer, ref_model: Any, valid: list[Trajectory]
) -> tuple[dict[str, float], dict[int, dict[str, Any]]]:
    """Credit assignment (``algorithm.name``) and the policy update on a step's valid trajectories.

    With ``env.reward_norm = "std"`` (a mixture) credit is assigned on copies whose rewards are
    scaled per env (:mod:`agentic_rl.trainer.mixture`); the update and records use ``valid``.

    The update is ``ppo_epochs`` passes over ``minibatches`` minibatches of whole groups, one
    optimizer step each; advantages are assigned once, over the whole batch. Later epochs reuse
    the first pass's advantages (and the critic's values as V_old). With the mismatch correction
    on, one no-grad forward first scores π_old of every kept trajectory.

    Returns:
        the update's metrics (means over its optimizer steps), and per trajectory (keyed by
        ``id``) the record fields of the credit view: ``advantage`` (the trajectory-level
        advantage, None where the method has none) and ``advantages = {"turn": [...], "token":
        [...]}`` (token list aligned with ``token_ids``, the advantages the loss used; 0 on
        untrained tokens).
    """
    cfg, ranks, critic = run.config, run.ranks, run.critic
    # env.reward_norm: credit sees each mixture env's rewards over its running std (else as is)
    scaled, norm_stats = scale_rewards(run, valid)
    credit = assign_credit(scaled, cfg.algorithm)
    # with a critic every trajectory trains (its advantages come from the update's GAE)
    keep = [
        i for i in range(len(valid)) if critic is not None or _trains(credit.advantages[i], cfg)
    ]
    # under torchrun every rank joins each update (a rank with nothing to train adds zero gradient)
    kept = ranks.sum([len(keep)])[0]
    split = functools.partial(_minibatch_split, valid, keep)
    minibatches = ranks.minibatches(split, keep, cfg.optim.minibatches)
    settings = loss_settings(run.config, run.placement.precision)
    # a KL reward penalty is already inside the first epoch's advantages
    later = settings if cfg.loss.kl_mode == "loss" else dataclasses.replace(settings, kl_coef=0.0)
    # π_old, the trainer before this step's first optimizer step (mismatch correction only)
    old = None
    if correction_on(settings) and keep:
        old = dict(zip(keep, old_policy_logprobs(run.model, [valid[i] for i in keep], settings)))
    used: dict[int, list[float]] = {}
    values: dict[int, list[float]] = {}
    rows: list[dict[str, float]] = []
    for epoch in range(cfg.optim.ppo_epochs if kept else 0):
        first = epoch == 0
        for mb in minibatches:
            # later epochs: the first pass's advantages; a critic computes its own on the first
            advantages = [list(used[i]) for i in mb] if not first else None
            step_critic = None
            if critic is not None:  # fresh GAE on the first pass, V_old on later ones
                rewards = [credit.token_rewards[i] for i in mb]
                step_critic = critic.setup(rewards, None if first else [values[i] for i in mb])
            elif first:
                advantages = [credit.advantages[i] for i in mb]
            result = ranks.update(
                policy_gradient_update,
                run.model,
                optimizer,
                [valid[i] for i in mb],
                advantages,
                settings if first else later,
                critic=step_critic,
                ref_model=ref_model,
                old_logprobs=None if old is None else [old[i] for i in mb],
            )
            rows.append(result.metrics)
            if first:
                used.update(zip(mb, result.advantages))
                values.update(zip(mb, result.values or []))
    stats: dict[str, float] = {
        "train/trajectories": float(kept),
        **_mean_stats(rows),
        **norm_stats,
    }
    if rows:
        stats["train/optimizer_steps"] = float(len(rows))
    return stats, _credit_view(valid, credit, used, cfg.loss.kl_mode)


def _trains(advantage: Any, cfg: TrainConfig) -> bool:
    """Whether a critic-free trajectory joins the update: all do with ``kl_coef > 0`` or with
    ``skip_zero_advantage`` off; otherwise only those with a nonzero advantage somewhere."""
    if not cfg.optim.skip_zero_advantage or cfg.loss.kl_coef > 0:
        return True
    if isinstance(advantage, float):
        return advantage != 0.0
    return any(x != 0.0 for x in advantage)


def _credit_view(
    valid: list[Trajectory], credit: Any, used: dict[int, list[float]], kl_mode: str
) -> dict[int, dict[str, Any]]:
    """Per trajectory (keyed by ``id``) the ``advantage`` and ``advantages`` record fields."""
    view = {}
    for i, t in enumerate(valid):
        tokens = used.get(i, [0.0] * len(t.token_ids))
        turn = credit.turn[i] if credit.turn[i] and kl_mode == "loss" else turn_means(t, tokens)
        view[id(t)] = {
            "advantage": credit.outcome[i],
            "advantages": {"turn": turn, "token": tokens},
        }
    return view
