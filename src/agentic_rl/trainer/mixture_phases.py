"""The recipe's phases on a mixture run: a sampling round, the warm-up's demonstrations, the
held-out evaluation, the stored records and the metrics, each env with its own settings.

What a mixture is and how its tasks are drawn: :mod:`agentic_rl.trainer.sampling.mixture`. The recipe
(:mod:`agentic_rl.trainer.recipe`, :mod:`agentic_rl.trainer.sampling.rollouts`) calls these functions
where a single-env run calls their one-env versions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.errors import ConfigError
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trainer.evaluation.held_out import evaluate, is_success, summarize
from agentic_rl.trainer.run import Run, replay_kwargs
from agentic_rl.trainer.sampling.backends import GenerationWorkersBackend
from agentic_rl.trainer.sampling.guidance import guide_round, oracle_episodes
from agentic_rl.trainer.sampling.mixture import (
    EnvSlot,
    MixTask,
    MixturePool,
    env_slots,
    is_mixture,
    slot_env_kwargs,
    slot_of,
    slot_replay_kwargs,
)
from agentic_rl.trajectories import trajectory_to_record
from agentic_rl.types import Trajectory

__all__ = [
    "mixture_demonstrations",
    "mixture_eval",
    "mixture_round",
    "mixture_summary",
    "record_kwargs",
    "scale_rewards",
    "store_mixture",
    "successful_demos",
]

#: offset between the sampling seeds of two envs' calls in Ray generation workers (whose
#: rollouts have no ``first_index``): far above any episode index of one round
_REMOTE_SEED_STRIDE = 2**40


def _group_id(step: int, slot: EnvSlot, seed: int) -> str:
    """A mixture group's id: its env is part of it (two envs may draw the same seed)."""
    return f"rl-{step}-{slot.id}-{seed}"


def _score(run: Run, slot: EnvSlot, trajectories: list[Trajectory], env: Any) -> list[Trajectory]:
    """``trajectories`` of ``slot`` scored with its rubric (``env``: one of its instances)."""
    return env.rubric(run.config.reward).apply_batch(trajectories) if trajectories else []


def _local_round(
    run: Run, step: int, episodes: list[tuple[EnvSlot, int]], sample_seed: int
) -> list[Trajectory]:
    """The round's episodes with the run's sampler, one ``run_episodes`` call per distinct
    rollout config (envs of equal budgets decode together), each env's scored by its rubric;
    in the order of ``episodes``."""
    cfg = run.config
    buckets: dict[RolloutConfig, list[int]] = {}
    for i, (slot, _seed) in enumerate(episodes):
        buckets.setdefault(slot.rollout, []).append(i)
    out: list[Trajectory | None] = [None] * len(episodes)
    first = 0  # each episode keeps its own sampling stream across the calls
    for rollout, members in buckets.items():
        slots = [episodes[i][0] for i in members]
        seeds = [episodes[i][1] for i in members]
        envs = [run.scale.make_env(s.id, **slot_env_kwargs(run, s)) for s in slots]
        try:
            trajectories = run_episodes(
                run.state.backend.policy,
                run.chat,
                envs,
                seeds,
                [_group_id(step, sl, se) for sl, se in zip(slots, seeds)],
                rollout,
                sample_seed=sample_seed,
                env_workers=max(4, cfg.scale.num_env_workers),
                first_index=first,
            )
            trajectories = run.state.backend.finish_round(trajectories)
            for slot in dict.fromkeys(slots):
                mine = [j for j, s in enumerate(slots) if s is slot]
                scored = _score(run, slot, [trajectories[j] for j in mine], envs[mine[0]])
                for j, t in zip(mine, scored):
                    out[members[j]] = t
        finally:
            for env in envs:
                env.close()
        first += len(members)
    return [t for t in out if t is not None]


def _remote_round(
    run: Run, step: int, episodes: list[tuple[EnvSlot, int]], sample_seed: int
) -> list[Trajectory]:
    """The round's episodes in the Ray generation workers, one call per env (each builds its
    own envs), scored here; in the order of ``episodes``."""
    out: list[Trajectory | None] = [None] * len(episodes)
    for slot in dict.fromkeys(s for s, _ in episodes):
        mine = [i for i, (s, _) in enumerate(episodes) if s is slot]
        seeds = [episodes[i][1] for i in mine]
        kwargs = slot_env_kwargs(run, slot)
        trajectories = run.state.backend.run_episodes(
            slot.id,
            kwargs,
            seeds,
            [_group_id(step, slot, s) for s in seeds],
            slot.rollout,
            sample_seed=sample_seed + _REMOTE_SEED_STRIDE * (slot.index + 1),
        )
        trajectories = run.state.backend.finish_round(trajectories)
        env = run.scale.make_env(slot.id, **kwargs)
        try:
            for i, t in zip(mine, _score(run, slot, trajectories, env)):
                out[i] = t
        finally:
            env.close()
    return [t for t in out if t is not None]


def mixture_round(
    run: Run, step: int, tasks: Sequence[MixTask], sample_seed: int
) -> list[Trajectory]:
    """Sample and score G rollouts of each task of one sampling round of a mixture run, then
    apply each env's off-policy guidance (:func:`~agentic_rl.trainer.sampling.guidance.guide_round`).

    Args:
        tasks: the round's (env, seed) tasks (:meth:`MixturePool.draw`).
        sample_seed: the round's sampling seed (every episode has its own stream of it).

    Returns:
        the scored rollouts, task by task (G consecutive rollouts of one env per group).
    """
    slots = env_slots(run.config)
    g = run.config.algorithm.group_size
    episodes = [(slots[task.slot], task.seed) for task in tasks for _ in range(g)]
    if not episodes:
        return []
    remote = isinstance(run.state.backend, GenerationWorkersBackend)
    scored = (_remote_round if remote else _local_round)(run, step, episodes, sample_seed)
    out = list(scored)
    for slot in dict.fromkeys(s for s, _ in episodes):  # guidance per env, its own oracle
        where = [i for i, t in enumerate(out) if t.env_id == slot.id]
        guided = guide_round(
            run,
            [out[i] for i in where],
            env_id=slot.id,
            kwargs=slot_env_kwargs(run, slot),
            rollout=slot.rollout,
        )
        for i, t in zip(where, guided):
            out[i] = t
    return out


def mixture_demonstrations(run: Run) -> list[Trajectory]:
    """Every env's oracle demonstrations (its ``warmup_demos`` seeds from ``warmup.seed_start``,
    its warm-up kwargs and budgets), scored; under torchrun each rank rolls out its share and
    every rank gets them all."""
    cfg = run.config
    demos: list[Trajectory] = []
    for slot in env_slots(cfg):
        start = cfg.warmup.seed_start
        seeds = run.ranks.shard(range(start, start + slot.warmup_demos))
        kwargs = slot_env_kwargs(run, slot, **slot.warmup_kwargs)
        ids = [f"demo-{slot.id}-{s}" for s in seeds]
        demos += oracle_episodes(run, seeds, ids, kwargs, env_id=slot.id, rollout=slot.rollout)
    return run.ranks.all_gather(demos)


def successful_demos(run: Run, demos: Sequence[Trajectory]) -> list[Trajectory]:
    """The demonstrations to train on (scored and successful: one cut by the budgets would
    teach a wrong reply).

    Raises:
        ConfigError: an env that has demonstrations has no successful one (the message names
            its entry's budgets).
    """
    good = [d for d in demos if not d.failed and is_success(d)]
    for slot in env_slots(run.config):
        if slot.warmup_demos and not any(d.env_id == slot.id for d in good):
            raise ConfigError(
                f"warm-up: no oracle demonstration of {slot.id} succeeds within its rollout "
                f"budgets (raise env.mix[{slot.index}].rollout.max_new_tokens or max_turns, or "
                f"set env.mix[{slot.index}].warmup_demos = 0 for an env without an oracle)"
            )
    return good


def mixture_eval(run: Run) -> list[Trajectory]:
    """Greedy rollouts of every env on its own held-out seeds (``eval_size`` from
    ``eval.seed_start``, its kwargs and budgets); rank 0 gets every rank's, other ranks []."""
    cfg = run.config
    out: list[Trajectory] = []
    for slot in env_slots(cfg):
        seeds = range(cfg.eval.seed_start, cfg.eval.seed_start + slot.eval_size)
        _, trajectories = evaluate(
            run.policy,
            run.chat,
            slot.id,
            slot_env_kwargs(run, slot),
            run.ranks.shard(seeds),
            slot.rollout,
            cfg.reward,
            batch_size=cfg.model.max_batch,
            make_env=run.scale.make_env,
            group_prefix=f"eval-{slot.id}",
        )
        run.policy.clear_cache()
        out += run.ranks.gather_to_main(trajectories)
    return out


def mixture_summary(
    slots: Sequence[EnvSlot], trajectories: Sequence[Trajectory], prefix: str
) -> dict[str, float]:
    """The metrics of a mixture's rollouts (``prefix`` ``rollout`` or ``eval``): pooled over every
    env (:func:`~agentic_rl.trainer.evaluation.held_out.summarize` without its per-level keys, whose names
    are each env's, and with the reward components every env has), and each env's under
    ``<prefix>/<env id>/`` (levels and components included, and ``episodes``: its count)."""
    out = summarize(trajectories, prefix)
    scored = [t for t in trajectories if not t.failed]
    common = set.intersection(*(set(t.reward_components) for t in scored)) if scored else set()
    out = {
        k: v
        for k, v in out.items()
        if not k.startswith(f"{prefix}/success/")
        and not (k.startswith(f"{prefix}/reward/") and k.split("/", 2)[2] not in common)
    }
    for slot in slots:
        mine = [t for t in trajectories if t.env_id == slot.id]
        if mine:
            out.update(summarize(mine, f"{prefix}/{slot.id}"))
            out[f"{prefix}/{slot.id}/episodes"] = float(len(mine))
    return out


def store_mixture(
    run: Run, trajectories: Sequence[Trajectory], *, warmup: bool = False, **extra: Any
) -> None:
    """Append one batch (one Parquet shard) of a mixture's trajectories, each record with its
    env's replay kwargs (``warmup``: with the env's warm-up kwargs) and ``extra``."""
    if run.store is None:  # ranks > 0 write nothing
        return
    slots = env_slots(run.config)
    kwargs = {
        s.id: slot_replay_kwargs(run, s, **(s.warmup_kwargs if warmup else {})) for s in slots
    }
    run.store.append(
        [
            trajectory_to_record(
                t, run_id=run.run_dir.name, env_kwargs=kwargs[slot_of(slots, t).id], **extra
            )
            for t in trajectories
        ]
    )


def record_kwargs(run: Run) -> Callable[[Trajectory], dict[str, Any]]:
    """``kwargs_of(trajectory)``: the env kwargs stored with an RL trajectory for replay (the
    run's env's, or in a mixture the trajectory's env's)."""
    if not is_mixture(run.config):
        single = replay_kwargs(run)
        return lambda _t: single
    by_id = {s.id: slot_replay_kwargs(run, s) for s in env_slots(run.config)}
    return lambda t: by_id[t.env_id]


def rollout_summary(run: Run, trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The ``rollout/*`` metrics of an RL step's own rollouts (per env too in a mixture)."""
    if not is_mixture(run.config):
        return summarize(trajectories, "rollout")
    return mixture_summary(env_slots(run.config), trajectories, "rollout")


def scale_rewards(
    run: Run, trajectories: Sequence[Trajectory]
) -> tuple[list[Trajectory], dict[str, float]]:
    """The trajectories credit assignment sees: with ``env.reward_norm = "std"`` copies whose
    rewards are divided by their env's running std + ε (:mod:`agentic_rl.trainer.sampling.mixture`),
    and ``reward_norm/<env id>/std``; otherwise ``trajectories`` as they are and ``{}``."""
    pool = run.task_pool
    if not isinstance(pool, MixturePool) or pool.norm is None:
        return list(trajectories), {}
    with pool.lock:
        stats = {f"reward_norm/{s.id}/std": pool.norm.std(s.id) for s in pool.slots}
        return pool.norm.scale(trajectories), stats
