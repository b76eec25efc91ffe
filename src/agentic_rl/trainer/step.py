"""One RL step, read top to bottom: sample → score → guide → credit → update → sync → record.

:func:`rl_step` is the whole step; each stage is a leaf it names:

1. **Sample, score, guide**: ``source.batch(step)`` (a :class:`RolloutSource`: the synchronous
   :class:`~agentic_rl.trainer.sampling.async_producer.InlineRollouts` or the producer thread of
   :class:`~agentic_rl.trainer.sampling.async_producer.AsyncRollouts`) runs ``group_size``
   episodes of each task from the same seed (:func:`~agentic_rl.trainer.sampling.rollouts.sample_step`:
   the rollout engine, then the rubric scores each trajectory), refills uninformative groups
   (dynamic sampling, :mod:`agentic_rl.trainer.sampling.task_pool`) and adds the env oracle's
   episode to an all-failed group (:mod:`agentic_rl.trainer.sampling.guidance`).
2. **Credit**: :func:`credit_and_update` assigns advantages once over the step's valid
   trajectories (``algorithm.name``, :func:`~agentic_rl.trainer.learning.credit.assign_credit`),
   keeps those that carry a gradient and cuts them into minibatches of whole groups.
3. **Update**: one PPO-clip optimizer step per minibatch and epoch
   (:func:`~agentic_rl.trainer.learning.update.policy_gradient_update`, through
   :meth:`~agentic_rl.trainer.parallel.ranks.Ranks.update` so data-parallel ranks average their
   gradients). With the sampler/trainer mismatch correction on (``[loss] tis_cap``/``mis_*``),
   π_old is scored once, before the step's first optimizer step
   (:mod:`agentic_rl.trainer.learning.mismatch_correction`).
4. **Sync**: the new weights go to the rollout sampler (``run.state.backend.sync``).
5. **Record**: rank 0 writes the step's metrics row and stores every trajectory with its
   credit view (``record["advantages"] = {"turn": [...], "token": [...]}``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Protocol

import torch

from agentic_rl.config import TrainConfig
from agentic_rl.rewards.rubric import RewardWeights
from agentic_rl.trainer.learning.credit import assign_credit, turn_means
from agentic_rl.trainer.learning.mismatch_correction import correction_on, old_policy_logprobs
from agentic_rl.trainer.learning.update import policy_gradient_update
from agentic_rl.trainer.mixture_phases import record_kwargs, rollout_summary, scale_rewards
from agentic_rl.trainer.run import Run
from agentic_rl.trainer.sampling.async_producer import InlineRollouts
from agentic_rl.trainer.sampling.guidance import is_guided
from agentic_rl.trainer.sampling.rollouts import sampling_metrics
from agentic_rl.trainer.sampling.task_pool import SampledBatch
from agentic_rl.trainer.sampling.weight_sync import staleness
from agentic_rl.trajectories import trajectory_to_record
from agentic_rl.types import Trajectory

__all__ = ["RolloutSource", "credit_and_update", "rl_step"]


class RolloutSource(Protocol):
    """Where an RL step's batch comes from (:mod:`agentic_rl.trainer.sampling.async_producer`)."""

    def batch(self, step: int) -> SampledBatch:
        """The scored (and guided) rollouts RL step ``step`` (0-based) trains on."""
        ...

    def close(self) -> None:
        """Stop whatever samples ahead (nothing for the synchronous source)."""
        ...


def rl_step(
    run: Run,
    step: int,
    optimizer: torch.optim.Optimizer,
    ref_model: Any,
    rollouts: RolloutSource | None = None,
) -> dict[str, Any]:
    """One RL step: rollouts (G of each task; dynamic sampling with refill when on), rubric,
    credit assignment, PPO-clip update(s); rank 0 logs and stores the whole step.

    Args:
        rollouts: where the step's batch comes from (:mod:`agentic_rl.trainer.sampling.async_producer`);
            None samples it here (the synchronous loop).

    Returns:
        the step's metrics row (rank 0's, on every rank: its time budget decides the last step).
    """
    t0 = time.perf_counter()
    source = rollouts or InlineRollouts(run)
    batch = source.batch(step)  # rollout + reward (k >= 1: sampled ahead by a producer thread)
    t_rollout = time.perf_counter() - t0
    valid = [t for t in batch.train if not t.failed]
    stats, credit_view = credit_and_update(run, optimizer, ref_model, valid)  # credit + update
    sync_s = run.state.backend.sync(run.model, step + 1)  # the new weights to the rollout sampler
    elapsed = time.perf_counter() - t0
    kwargs_of = record_kwargs(run)  # the env kwargs replay needs (each env's in a mixture)
    records = [
        trajectory_to_record(
            t,
            run_id=run.run_dir.name,
            env_kwargs=kwargs_of(t),
            phase="rl",
            step=step + 1,
            rl_step=step + 1,
            **credit_view.get(id(t), {"advantage": None}),
        )
        for t in batch.all
    ]
    pairs = run.ranks.gather_to_main(list(zip(batch.all, records)))  # rank 0: every rank's
    row = None
    if run.ranks.is_main:
        trajectories, records = [p[0] for p in pairs], [p[1] for p in pairs]
        own = [t for t in trajectories if not is_guided(t)]  # the policy's samples (no guidance)
        generated = sum(t.num_generated_tokens for t in own)
        row = {
            "phase": "rl",
            "step": step + 1,
            "rl_step": step + 1,
            **rollout_summary(run, own),  # a mixture's: pooled and per env
            **_reward_shares(own, run.config.reward),
            **sampling_metrics(run, batch),
            **stats,
            "perf/step_time_s": elapsed,
            "perf/rollout_time_s": t_rollout,
            "perf/update_time_s": elapsed - t_rollout - sync_s,
            "perf/weight_sync_s": sync_s,
            **staleness(trajectories, step),  # RL steps the sampler's weights lagged the trainer
            "perf/tokens_per_s": generated / max(t_rollout, 1e-9),
        }
        run.metrics.write(row)
        run.store.append(records)
    return run.ranks.broadcast_from_main(row)


def credit_and_update(
    run: Run, optimizer: torch.optim.Optimizer, ref_model: Any, valid: list[Trajectory]
) -> tuple[dict[str, float], dict[int, dict[str, Any]]]:
    """Credit assignment (``algorithm.name``) and the policy update on a step's valid trajectories.

    With ``env.reward_norm = "std"`` (a mixture) credit is assigned on copies whose rewards are
    scaled per env (:mod:`agentic_rl.trainer.sampling.mixture`); the update and records use ``valid``.

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
    settings = run.loss
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


def _reward_shares(trajectories: list[Trajectory], weights: RewardWeights) -> dict[str, float]:
    """Mean weighted outcome and process contributions to the reward, and the process share."""
    scored = [t for t in trajectories if not t.failed]
    if not scored:
        return {}
    outcome = sum(weights.outcome * t.reward_components.get("outcome", 0.0) for t in scored) / len(
        scored
    )
    process = sum(weights.process * t.reward_components.get("process", 0.0) for t in scored) / len(
        scored
    )
    total = abs(outcome) + abs(process)
    return {
        "rollout/reward_from_outcome": outcome,
        "rollout/reward_from_process": process,
        "rollout/process_share": abs(process) / total if total else 0.0,
    }


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
