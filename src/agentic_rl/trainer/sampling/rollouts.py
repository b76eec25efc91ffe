"""The rollouts of one RL step: task seeds, G episodes of each task from the same seed, the rubric.

A step draws ``tasks_per_step`` tasks (``sampling.task_sampling``: sequential seeds or the task
pool's), rolls out ``group_size`` episodes of each through the rollout engine
(:func:`agentic_rl.rollout.run_episodes`) and scores them with the env's rubric; with
``sampling.dynamic_sampling`` it samples more rounds until enough informative groups are found
(:func:`agentic_rl.trainer.sampling.task_pool.sample_with_refill`). Under torchrun each rank rolls out its
own share of the tasks (whole groups).
"""

from __future__ import annotations

from agentic_rl.rollout import run_episodes
from agentic_rl.trainer.evaluation.held_out import is_success
from agentic_rl.trainer.mixture_phases import mixture_round
from agentic_rl.trainer.run import Run, env_kwargs
from agentic_rl.trainer.sampling.backends import GenerationWorkersBackend
from agentic_rl.trainer.sampling.guidance import guide_round, is_guided
from agentic_rl.trainer.sampling.mixture import MixturePool
from agentic_rl.trainer.sampling.task_pool import TRAIN_SEED_SPAN, SampledBatch, sample_with_refill
from agentic_rl.types import Trajectory

__all__ = ["groups_needed", "sample_step", "sampling_metrics"]


def _rollout_round(
    run: Run, step: int, round_index: int, task_seeds: list[int]
) -> list[Trajectory]:
    """Sample and score G rollouts of each task of one round (envs closed afterwards)."""
    cfg = run.config
    seeds = [s for s in task_seeds for _ in range(cfg.algorithm.group_size)]
    sample_seed = _sample_seed(run, step, round_index)
    if isinstance(run.state.backend, GenerationWorkersBackend) and seeds:
        return guide_round(run, _remote_round(run, step, seeds, sample_seed))
    envs = [run.scale.make_env(cfg.env.id, **env_kwargs(run)) for _ in seeds]
    try:
        trajectories = (
            run_episodes(
                run.state.backend.policy,  # rollout.backend's sampler (local by default)
                run.chat,
                envs,
                seeds,
                [f"rl-{step}-{s}" for s in seeds],
                cfg.rollout,
                sample_seed=sample_seed,
                # threads stepping envs: one per env worker, so remote steps overlap
                env_workers=max(4, cfg.scale.num_env_workers),
            )
            if seeds
            else []
        )
        # the round's episodes are over: free their KV, stamp the policy version, mark failed requests
        trajectories = run.state.backend.finish_round(trajectories)
        rubric = envs[0].rubric(cfg.reward) if envs else None
        # batched components (an LLM judge) see the whole round at once
        scored = rubric.apply_batch(trajectories) if rubric else []
    finally:
        for env in envs:
            env.close()
    # sampling.guidance (on by default): the oracle's episode in all-failed groups
    return guide_round(run, scored)


def _sample_seed(run: Run, step: int, round_index: int) -> int:
    """The sampling seed of one round (each episode has its own stream of it): the same step
    samples the same tokens after a resume; one per rank."""
    cfg, ranks = run.config, run.ranks
    return (
        (cfg.seed * 1_000_003 + step) * ranks.world_size + ranks.rank + round_index * 1_000_000_007
    )


def _remote_round(run: Run, step: int, seeds: list[int], sample_seed: int) -> list[Trajectory]:
    """One round's episodes in the Ray generation workers (each builds its own envs), scored
    here with the rubric of one env built in this process (or the env workers)."""
    cfg = run.config
    kwargs = env_kwargs(run)
    trajectories = run.state.backend.run_episodes(
        cfg.env.id,
        kwargs,
        seeds,
        [f"rl-{step}-{s}" for s in seeds],
        cfg.rollout,
        sample_seed=sample_seed,
    )
    trajectories = run.state.backend.finish_round(trajectories)
    env = run.scale.make_env(cfg.env.id, **kwargs)
    try:
        return env.rubric(cfg.reward).apply_batch(trajectories)
    finally:
        env.close()


def _task_seeds(run: Run, step: int, round_index: int, n: int, exclude: list[int]) -> list[int]:
    """The task seeds of one sampling round: sequential (``task_sampling = "sequential"``) or the
    task pool's."""
    cfg = run.config
    alg, sampling = cfg.algorithm, cfg.sampling
    # refill rounds take seeds from the upper half of the range
    if sampling.task_sampling == "sequential":
        first = (
            cfg.env.train_seed_start + step * alg.tasks_per_step
            if round_index == 0
            else cfg.env.train_seed_start
            + TRAIN_SEED_SPAN // 2
            + (step * sampling.max_sample_rounds + round_index) * n
        )
        return run.ranks.shard([first + j for j in range(n)])
    return run.task_pool.draw(n, exclude)


def groups_needed(run: Run) -> int:
    """The groups this rank trains on per step: its contiguous share of ``tasks_per_step``."""
    return len(run.ranks.shard(list(range(run.config.algorithm.tasks_per_step))))


def sample_step(run: Run, step: int) -> SampledBatch:
    """The scored rollouts of RL step ``step`` on this rank (dynamic sampling with refill when
    on); the task pool (if any) learns each level's success rate from them. A mixture run
    (``[[env.mix]]``) draws (env, seed) tasks from its :class:`MixturePool`, each group one env's
    (:func:`~agentic_rl.trainer.mixture_phases.mixture_round`)."""
    alg, sampling = run.config.algorithm, run.config.sampling
    mixture = run.task_pool if isinstance(run.task_pool, MixturePool) else None
    needed = groups_needed(run)
    per_round = (
        (sampling.rollout_tasks or alg.tasks_per_step)
        if sampling.dynamic_sampling
        else alg.tasks_per_step
    )
    if sampling.task_sampling != "sequential" or mixture:  # torchrun: this rank's share
        per_round = len(run.ranks.shard(list(range(per_round))))
    drawn: list = []  # the step's task seeds so far (a mixture's: MixTasks)

    def one_round(r: int) -> list[Trajectory]:
        if mixture is not None:
            tasks = mixture.draw(per_round, drawn)
            drawn.extend(tasks)
            return mixture_round(run, step, tasks, _sample_seed(run, step, r))
        seeds = _task_seeds(run, step, r, per_round, drawn)
        drawn.extend(seeds)
        return _rollout_round(run, step, r, seeds)

    batch = (
        sample_with_refill(
            one_round,
            groups_needed=max(needed, 1),
            max_rounds=sampling.max_sample_rounds,
            dynamic=sampling.dynamic_sampling,
        )
        if needed
        else SampledBatch([], [], 0, 0, 0)
    )
    if run.task_pool is not None:  # the policy's own samples only (no guidance episodes)
        run.task_pool.update([t for t in batch.all if not is_guided(t)], is_success)
    return batch


def sampling_metrics(run: Run, batch: SampledBatch) -> dict[str, float]:
    """``rollout/*`` counts of the step's sampling (groups sampled, informative, trained, short;
    with async training the rollouts dropped as stale), with difficulty sampling
    ``pool/accept/<level>`` acceptance rates (a mixture's: ``pool/accept/<env id>/<level>``), and
    in a mixture each env's ``rollout/<env id>/groups_trained``."""
    trained = len({t.group_id for t in batch.train})
    out = {
        "rollout/groups_sampled": batch.groups_sampled,
        "rollout/groups_informative": batch.groups_informative,
        "rollout/informative_share": batch.groups_informative / max(batch.groups_sampled, 1),
        "rollout/sample_rounds": batch.rounds,
        "rollout/groups_trained": trained,
        "rollout/groups_shortfall": max(groups_needed(run) - trained, 0),
    }
    if run.config.algorithm.max_off_policy_steps:  # async: too old to train on (async_rollouts)
        out["rollout/dropped_stale"] = batch.stale
    if run.config.sampling.guidance != "off":
        out["rollout/groups_guided"] = len({t.group_id for t in batch.train if is_guided(t)})
    if run.state.agent is not None:  # [agent]: rollouts excluded by kind (timeouts, agent errors)
        out.update(run.state.agent.metrics(batch))
    pool = run.task_pool
    if isinstance(pool, MixturePool):  # each env's share of the trained groups
        for slot in pool.slots:
            mine = {t.group_id for t in batch.train if t.env_id == slot.id}
            out[f"rollout/{slot.id}/groups_trained"] = len(mine)
    if pool is not None and run.config.sampling.task_sampling == "difficulty":
        out.update({f"pool/accept/{lv}": pool.acceptance(lv) for lv in sorted(pool.counts)})
    return out
