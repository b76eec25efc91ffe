"""The training recipe: supervised warm-up on oracle demonstrations, then GRPO on the full task mix.

Read top to bottom, it is the whole data flow of DESIGN.md::

    seeds -> env.reset -> rollout engine (policy.generate, tool-call parser, env.step)
          -> trajectories -> rubric -> credit assignment (advantages) -> PPO-clip loss -> optimizer.step()

Phases: (1) greedy evaluation of the base model on held-out seeds; (2) warm-up: supervised
fine-tuning on the env oracle's demonstrations, rendered through the same token-in/token-out
path (loss only on the assistant's tokens); evaluation; checkpoint; (3) RL: each step samples
``tasks_per_step`` tasks × ``group_size`` rollouts from the same seed, scores them, assigns
credit with ``algorithm.name`` (group-relative by default; see :mod:`agentic_rl.trainer.credit`
for GiGPO, turn-level credit, REINFORCE++ and PPO with a value head) and takes one PPO-clip step
against the logprobs recorded at sampling; the per-turn and per-token advantages go into each
stored RL record as ``record["advantages"] = {"turn": [...], "token": [...]}``; periodic
evaluation and checkpoints; (4) final evaluation, the final model as a HF
directory, ``summary.json`` and ``report.html``. ``resume`` continues from the newest
checkpoint with the same optimizer, RNG and step.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config import TrainConfig, load_config, save_config
from agentic_rl.envs import accepts, make
from agentic_rl.errors import ConfigError
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.fast import make_policy_from_config
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import run_episodes
from agentic_rl.trainer.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from agentic_rl.trainer.credit import ALGORITHMS, CRITIC_ALGORITHMS, assign_credit, turn_means
from agentic_rl.trainer.critic import ValueModel, hidden_size
from agentic_rl.trainer.distributed import (
    all_reduce_sum,
    broadcast_parameters,
    data_parallel_update,
    shard,
)
from agentic_rl.trainer.evaluation import evaluate, is_success, summarize
from agentic_rl.trainer.optim import make_optimizer
from agentic_rl.trainer.outputs import export_model, write_summary
from agentic_rl.trainer.reference import REFERENCE_FILE, reference_model, save_reference
from agentic_rl.trainer.report import write_report
from agentic_rl.trainer.run_dir import MetricsLog, new_run_dir, truncate_after
from agentic_rl.trainer.sampling import TRAIN_SEED_SPAN, SampledBatch, TaskPool, sample_with_refill
from agentic_rl.trainer.scale import (
    NullMetricsLog,
    ScaleOut,
    all_gather_items,
    broadcast_from_main,
    check_scale,
    gather_to_main,
    launched_world_size,
    replica_digests,
    scale_out,
)
from agentic_rl.trainer.tracking import run_metrics_log
from agentic_rl.trainer.update import CriticSetup, policy_gradient_update, sft_update
from agentic_rl.trajectories import RUN_STORE_DIRNAME, TrajectoryStore, trajectory_to_record
from agentic_rl.types import Trajectory

log = logging.getLogger(__name__)

#: progress callback: (phase, done, total, message)
Progress = Callable[[str, int, int, str], None]


def _no_progress(phase: str, done: int, total: int, message: str) -> None:
    pass


@dataclass
class Run:
    """Everything one training run holds (built by :func:`setup`)."""

    config: TrainConfig
    run_dir: Path
    model: Any
    tokenizer: Any
    chat: ChatFormat
    policy: Any  # FastPolicy or HFPolicy (model.sampler)
    sampler: torch.Generator
    metrics: MetricsLog
    store: TrajectoryStore
    evals: list[dict[str, Any]]
    timings: dict[str, float]
    critic: ValueModel | None = None
    scale: ScaleOut = dataclasses.field(default_factory=ScaleOut)  # rank and env placement
    task_pool: TaskPool | None = (
        None  # RL task seeds (None: algorithm.task_sampling = "sequential")
    )


def validate(config: TrainConfig) -> Path:
    """Check what the config names before any work: env id and kwargs, model path.

    Returns:
        the resolved model directory.

    Raises:
        UnknownEnvError: ``env.id`` is not registered.
        ConfigError: the env rejects ``env.kwargs`` or ``warmup.env_kwargs``; ``[scale]`` names
            an unreachable Ray cluster (see :func:`~agentic_rl.trainer.scale.check_scale`).
        ModelNotFoundError: ``model.path`` does not exist.
    """
    base = {**permission_kwargs(config), **config.env.kwargs}
    for section, kwargs in (
        ("env.kwargs", base),
        ("warmup.env_kwargs", {**base, **config.warmup.env_kwargs}),
    ):
        try:
            make(config.env.id, **kwargs).close()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{section} rejected by {config.env.id}: {exc}") from None
    if config.algorithm.name not in ALGORITHMS:
        raise ConfigError(
            f"algorithm.name: unknown algorithm {config.algorithm.name!r}; "
            f"known: {', '.join(sorted(ALGORITHMS))}"
        )
    check_scale(config)
    return resolve_model_dir(config.model.path)


def setup(config: TrainConfig, run_dir: Path, scale: ScaleOut | None = None) -> Run:
    """Load the model (LoRA and gradient checkpointing as configured) and open the run's logs
    (on rank 0 only; under torchrun the other ranks take rank 0's initial weights).

    Raises:
        UnknownEnvError: ``env.id`` is not registered (checked before the model loads).
        ModelNotFoundError: ``model.path`` does not exist.
    """
    model_dir = validate(config)
    if config.model.num_threads:
        torch.set_num_threads(config.model.num_threads)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    tokenizer = load_tokenizer(model_dir)
    model = load_model(model_dir)
    if config.model.lora:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.model.lora_rank,
            lora_alpha=config.model.lora_alpha,
            lora_dropout=config.model.lora_dropout,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    if config.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    scale = scale or ScaleOut()
    broadcast_parameters(model, scale.ctx)
    main = scale.ctx.is_main
    chat = ChatFormat(tokenizer)
    sampler = torch.Generator().manual_seed(config.seed)
    policy = make_policy_from_config(
        model, config.model, chat.eos_token_id, tokenizer.pad_token_id, generator=sampler
    )
    return Run(
        config,
        run_dir,
        model,
        tokenizer,
        chat,
        policy,
        sampler,
        run_metrics_log(run_dir, config.tracking, config=dataclasses.asdict(config))
        if main
        else NullMetricsLog(),
        TrajectoryStore(run_dir / RUN_STORE_DIRNAME) if main else None,
        [],
        {},
        scale=scale,
    )


def permission_kwargs(config: TrainConfig) -> dict[str, Any]:
    """``{"permissions": <[tools.permissions] table>}`` when that table is set, else ``{}``.

    Raises:
        ConfigError: the table is set but the env takes no ``permissions`` argument.
    """
    if not config.tools.permissions:
        return {}
    if not accepts(config.env.id, "permissions"):
        raise ConfigError(
            f"tools.permissions is set, but env {config.env.id!r} takes no 'permissions' argument"
        )
    return {"permissions": config.tools.permissions}


def env_kwargs(run: Run, **extra: Any) -> dict[str, Any]:
    """Constructor arguments of the run's envs: ``[tools.permissions]`` (as ``permissions``),
    ``env.kwargs``, ``extra``, and, for envs that take them, the run's audit log
    (``RUN_DIR/audit.jsonl``) and run id."""
    kwargs = {**permission_kwargs(run.config), **run.config.env.kwargs, **extra}
    if accepts(run.config.env.id, "audit_path"):
        kwargs.setdefault("audit_path", str(run.run_dir / "audit.jsonl"))
    if accepts(run.config.env.id, "run_id"):
        kwargs.setdefault("run_id", run.run_dir.name)
    return kwargs


def _update_fn(
    run: Run, update: Callable[..., dict[str, float]]
) -> Callable[..., dict[str, float]]:
    """``update`` itself, or under torchrun ``update`` inside :func:`data_parallel_update`."""
    return functools.partial(data_parallel_update, update) if run.scale.ctx.distributed else update


def _replay_kwargs(run: Run, **extra: Any) -> dict[str, Any]:
    """The env kwargs stored with each trajectory so replay can rebuild its env (no audit path)."""
    return {k: v for k, v in env_kwargs(run, **extra).items() if k not in ("audit_path", "run_id")}


def _store(
    run: Run, trajectories: list[Trajectory], env_extra: dict[str, Any] | None = None, **extra: Any
) -> None:
    """Append one batch (one Parquet shard) with the run id and the env kwargs replay needs."""
    if run.store is None:  # ranks > 0 write nothing
        return
    kwargs = _replay_kwargs(run, **(env_extra or {}))
    run.store.append(
        [
            trajectory_to_record(t, run_id=run.run_dir.name, env_kwargs=kwargs, **extra)
            for t in trajectories
        ]
    )


def run_eval(run: Run, tag: str, rl_step: int, progress: Progress) -> dict[str, Any]:
    """Greedy evaluation on the held-out seeds; logs and returns the eval row."""
    cfg = run.config
    progress("eval", 0, 1, f"evaluating ({tag}) on {cfg.eval.size} held-out tasks")
    started = time.perf_counter()
    ctx = run.scale.ctx
    seeds = shard(range(cfg.eval.seed_start, cfg.eval.seed_start + cfg.eval.size), ctx)
    # chunks of max_batch episodes: the KV of more episodes than decode together is memory, not speed
    metrics, trajectories = evaluate(
        run.policy,
        run.chat,
        cfg.env.id,
        env_kwargs(run),
        seeds,
        cfg.rollout,
        cfg.reward,
        batch_size=cfg.model.max_batch,
        make_env=run.scale.make_env,
    )
    run.policy.clear_cache()
    if ctx.distributed:  # each rank evaluated its share of the seeds; rank 0 reports them all
        trajectories = gather_to_main(trajectories, ctx)
        if not ctx.is_main:
            return {}
        metrics = summarize(trajectories, "eval")
    row = {
        "phase": "eval",
        "tag": tag,
        "rl_step": rl_step,
        "step": rl_step,
        **metrics,
        "perf/eval_seconds": time.perf_counter() - started,
    }
    run.metrics.write(row)
    _store(
        run,
        trajectories,
        phase="eval",
        tag=tag,
        rl_step=rl_step,
        step=rl_step,
        policy_version=rl_step,
    )
    run.evals.append(row)
    progress("eval", 1, 1, f"{tag}: success {metrics['eval/success']:.0%}")
    return row


def oracle_demonstrations(run: Run) -> list[Trajectory]:
    """Roll out the env oracle on the warm-up seeds through the normal token-in/token-out path."""
    cfg = run.config
    seeds = shard(
        range(cfg.warmup.seed_start, cfg.warmup.seed_start + cfg.warmup.num_demos), run.scale.ctx
    )
    envs = [
        run.scale.make_env(cfg.env.id, **env_kwargs(run, **cfg.warmup.env_kwargs)) for _ in seeds
    ]
    oracle = ScriptedPolicy(run.chat, lambda i, _context: envs[i].oracle_reply() or "")
    demos = (
        run_episodes(oracle, run.chat, envs, seeds, [f"demo-{s}" for s in seeds], cfg.rollout)
        if seeds
        else []
    )
    rubric = envs[0].rubric(cfg.reward) if envs else None
    for env in envs:
        env.close()
    # under torchrun each rank rolled out its share; every rank gets all demos, in seed order
    return all_gather_items([rubric.apply(t) for t in demos], run.scale.ctx)


def warmup(run: Run, progress: Progress) -> None:
    """Supervised fine-tuning on oracle demonstrations (loss on the assistant's tokens only)."""
    cfg = run.config.warmup
    started = time.perf_counter()
    all_demos = oracle_demonstrations(run)
    # a demo cut by the rollout budgets would teach a wrong reply: keep only successful ones
    demos = [d for d in all_demos if not d.failed and is_success(d)]
    if not demos:
        raise ConfigError(
            "warm-up: no oracle demonstration succeeds within the rollout budgets "
            "(raise rollout.max_new_tokens or rollout.max_turns)"
        )
    if len(demos) < len(all_demos):
        log.warning(
            "warm-up: %d of %d oracle demonstrations failed within the rollout budgets and were dropped",
            len(all_demos) - len(demos),
            len(all_demos),
        )
    _store(run, demos, cfg.env_kwargs, phase="warmup", step=0, rl_step=0)
    optimizer = make_optimizer(run, cfg.lr)
    update = _update_fn(run, sft_update)
    rng = random.Random(run.config.seed)
    total = cfg.epochs * -(-len(demos) // cfg.batch_size)
    step = 0
    for _epoch in range(cfg.epochs):
        order = demos[:]
        rng.shuffle(order)
        for i in range(0, len(order), cfg.batch_size):
            t0 = time.perf_counter()
            stats = update(
                run.model,
                optimizer,
                shard(order[i : i + cfg.batch_size], run.scale.ctx),
                micro_batch_size=run.config.algorithm.micro_batch_size,
                micro_batch_tokens=run.config.algorithm.micro_batch_tokens,
            )
            step += 1
            run.metrics.write(
                {
                    "phase": "warmup",
                    "step": step,
                    "rl_step": 0,
                    **stats,
                    "perf/step_time_s": time.perf_counter() - t0,
                }
            )
            progress("warmup", step, total, f"loss {stats['train/loss']:.3f}")
    run.timings["warmup_seconds"] = time.perf_counter() - started


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


def _credit_and_update(
    run: Run, optimizer: torch.optim.Optimizer, ref_model: Any, valid: list[Trajectory]
) -> tuple[dict[str, float], dict[int, dict[str, Any]]]:
    """Credit assignment (``algorithm.name``) and the policy update on a step's valid trajectories.

    The update is ``ppo_epochs`` passes over ``minibatches`` minibatches of whole groups, one
    optimizer step each; advantages are assigned once, over the whole batch.

    Returns:
        the update's metrics (means over its optimizer steps), and per trajectory (keyed by
        ``id``) the record fields of the credit view: ``advantage`` (the trajectory-level
        advantage, None where the method has none) and ``advantages = {"turn": [...], "token":
        [...]}`` (token list aligned with ``token_ids``, the advantages the loss used; 0 on
        untrained tokens).
    """
    cfg = run.config
    alg = cfg.algorithm
    credit = assign_credit(valid, alg)
    uses_critic = alg.name in CRITIC_ALGORITHMS

    def nonzero(a) -> bool:
        return a != 0.0 if isinstance(a, float) else any(x != 0.0 for x in a)

    keep = [
        i
        for i in range(len(valid))
        if uses_critic
        or not alg.skip_zero_advantage
        or alg.kl_coef > 0
        or nonzero(credit.advantages[i])
    ]
    ctx = run.scale.ctx
    # under torchrun every rank joins each update (a rank with nothing to train adds zero gradient)
    kept = all_reduce_sum([len(keep)], ctx)[0] if ctx.distributed else len(keep)
    # under torchrun every rank must run the same number of optimizer steps: one minibatch there
    minibatches = [keep] if ctx.distributed else _minibatch_split(valid, keep, alg.minibatches)
    used: dict[int, list[float]] = {}
    values: dict[int, list[float]] = {}
    rows: list[dict[str, float]] = []
    update = _update_fn(run, policy_gradient_update)
    for epoch in range(alg.ppo_epochs if kept else 0):
        first = epoch == 0
        for mb in minibatches:
            critic = None
            if uses_critic:
                critic = CriticSetup(
                    run.critic.head,
                    run.critic.optimizer,
                    [credit.token_rewards[i] for i in mb],
                    gamma=alg.gamma,
                    lam=alg.lam,
                    clip_eps=alg.value_clip or None,
                    max_grad_norm=alg.max_grad_norm,
                    old_values=None if first else [values[i] for i in mb],
                )
            given = [credit.advantages[i] for i in mb] if not uses_critic else None
            mb_used: list = []
            mb_values: list = []
            rows.append(
                update(
                    run.model,
                    optimizer,
                    [valid[i] for i in mb],
                    given if first else [list(used[i]) for i in mb],
                    micro_batch_size=alg.micro_batch_size,
                    micro_batch_tokens=alg.micro_batch_tokens,
                    clip_eps_low=alg.clip_eps_low,
                    clip_eps_high=alg.clip_eps_high,
                    dual_clip=alg.dual_clip or None,
                    kl_estimator=alg.kl_estimator,
                    kl_mode=alg.kl_mode,
                    # a KL reward penalty is already inside the first epoch's advantages
                    kl_coef=alg.kl_coef if first or alg.kl_mode == "loss" else 0.0,
                    ref_model=ref_model,
                    temperature=cfg.rollout.temperature,
                    max_grad_norm=alg.max_grad_norm,
                    loss_agg=alg.loss_agg,
                    loss_norm_constant=alg.loss_norm_constant
                    or cfg.rollout.max_turns * cfg.rollout.max_new_tokens,
                    gamma=alg.gamma,
                    critic=critic,
                    advantages_out=mb_used if first else None,
                    values_out=mb_values if first else None,
                )
            )
            if first:
                used.update(zip(mb, mb_used))
                values.update(zip(mb, mb_values))
    stats: dict[str, float] = {"train/trajectories": float(kept), **_mean_stats(rows)}
    if rows:
        stats["train/optimizer_steps"] = float(len(rows))
    view = {}
    for i, t in enumerate(valid):
        tokens = used.get(i, [0.0] * len(t.token_ids))
        turn = credit.turn[i] if credit.turn[i] and alg.kl_mode == "loss" else turn_means(t, tokens)
        view[id(t)] = {
            "advantage": credit.outcome[i],
            "advantages": {"turn": turn, "token": tokens},
        }
    return stats, view


def _rollout_round(
    run: Run, step: int, round_index: int, task_seeds: list[int]
) -> list[Trajectory]:
    """Sample and score G rollouts of each task of one round (envs closed afterwards)."""
    cfg = run.config
    ctx = run.scale.ctx
    seeds = [s for s in task_seeds for _ in range(cfg.algorithm.group_size)]
    envs = [run.scale.make_env(cfg.env.id, **env_kwargs(run)) for _ in seeds]
    # per-episode sampling seeds: the same step samples the same tokens after a resume (one per rank)
    sample_seed = (
        (cfg.seed * 1_000_003 + step) * ctx.world_size + ctx.rank + round_index * 1_000_000_007
    )
    try:
        trajectories = (
            run_episodes(
                run.policy,
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
        run.policy.clear_cache()  # the round's episodes are over: free their KV
        rubric = envs[0].rubric(cfg.reward) if envs else None
        return [rubric.apply(t) for t in trajectories]
    finally:
        for env in envs:
            env.close()


def _task_seeds(run: Run, step: int, round_index: int, n: int, exclude: list[int]) -> list[int]:
    """The task seeds of one sampling round: sequential (``task_sampling = "sequential"``) or the task pool's."""
    cfg = run.config
    alg = cfg.algorithm
    if (
        alg.task_sampling == "sequential"
    ):  # refill rounds take seeds from the upper half of the range
        first = (
            cfg.env.train_seed_start + step * alg.tasks_per_step
            if round_index == 0
            else cfg.env.train_seed_start
            + TRAIN_SEED_SPAN // 2
            + (step * alg.max_sample_rounds + round_index) * n
        )
        return shard([first + j for j in range(n)], run.scale.ctx)
    return run.task_pool.draw(n, exclude)


def _reward_shares(trajectories: list[Trajectory], weights) -> dict[str, float]:
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


def rl_step(
    run: Run, step: int, optimizer: torch.optim.Optimizer, ref_model: Any
) -> dict[str, Any]:
    """One RL step: G rollouts of each task (dynamic sampling with refill when on), rubric,
    credit assignment, PPO-clip update(s)."""
    cfg = run.config
    alg = cfg.algorithm
    ctx = run.scale.ctx
    t0 = time.perf_counter()
    # under torchrun (sequential sampling): this rank's contiguous share of the tasks (whole groups)
    needed = len(shard(list(range(alg.tasks_per_step)), ctx))
    per_round = (
        (alg.rollout_tasks or alg.tasks_per_step) if alg.dynamic_sampling else alg.tasks_per_step
    )
    if ctx.distributed and alg.task_sampling != "sequential":
        per_round = len(shard(list(range(per_round)), ctx))
    drawn: list[int] = []

    def one_round(r: int) -> list[Trajectory]:
        seeds = _task_seeds(run, step, r, per_round, drawn)
        drawn.extend(seeds)
        return _rollout_round(run, step, r, seeds)

    batch = (
        sample_with_refill(
            one_round,
            groups_needed=max(needed, 1),
            max_rounds=alg.max_sample_rounds,
            dynamic=alg.dynamic_sampling,
        )
        if needed
        else SampledBatch([], [], 0, 0, 0)
    )
    if run.task_pool is not None:
        run.task_pool.update(batch.all, is_success)
    t_rollout = time.perf_counter() - t0
    valid = [t for t in batch.train if not t.failed]
    stats, credit_view = _credit_and_update(run, optimizer, ref_model, valid)
    elapsed = time.perf_counter() - t0
    kwargs = _replay_kwargs(run)
    trajectories = batch.all
    records = [
        trajectory_to_record(
            t,
            run_id=run.run_dir.name,
            env_kwargs=kwargs,
            phase="rl",
            step=step + 1,
            rl_step=step + 1,
            policy_version=step,
            **credit_view.get(id(t), {"advantage": None}),
        )
        for t in trajectories
    ]
    if ctx.distributed:  # rank 0 logs and stores the whole step
        pairs = gather_to_main(list(zip(trajectories, records)), ctx)
        trajectories, records = [p[0] for p in pairs], [p[1] for p in pairs]
    row = None
    if ctx.is_main:
        generated = sum(t.num_generated_tokens for t in trajectories)
        sampling = {
            "rollout/groups_sampled": batch.groups_sampled,
            "rollout/groups_informative": batch.groups_informative,
            "rollout/informative_share": batch.groups_informative / max(batch.groups_sampled, 1),
            "rollout/sample_rounds": batch.rounds,
            "rollout/groups_trained": len({t.group_id for t in batch.train}),
            "rollout/groups_shortfall": max(needed - len({t.group_id for t in batch.train}), 0),
        }
        pool = (
            {
                f"pool/accept/{lv}": run.task_pool.acceptance(lv)
                for lv in sorted(run.task_pool.counts)
            }
            if run.task_pool is not None and alg.task_sampling == "difficulty"
            else {}
        )
        row = {
            "phase": "rl",
            "step": step + 1,
            "rl_step": step + 1,
            **summarize(trajectories, "rollout"),
            **_reward_shares(trajectories, cfg.reward),
            **sampling,
            **pool,
            **stats,
            "perf/step_time_s": elapsed,
            "perf/rollout_time_s": t_rollout,
            "perf/update_time_s": elapsed - t_rollout,
            "perf/tokens_per_s": generated / max(t_rollout, 1e-9),
        }
        run.metrics.write(row)
        run.store.append(records)
    return broadcast_from_main(
        row, ctx
    )  # every rank takes rank 0's decisions (time budget, last step)


def budget_reached(spent_s: float, steps_run: int, budget_s: float) -> bool:
    """Whether an RL run with a wall-clock budget should stop after its latest step.

    Steps are indivisible, so a run can only stop between them. It stops when one more step of
    the mean length so far would end further from the budget than stopping now, i.e. when
    ``spent + mean/2 >= budget``: the run ends at the step count whose expected total is closest
    to the budget (a stop-only-after-the-budget rule overshoots by up to a whole step, which
    favours methods with long steps in equal-budget comparisons). At least one step always runs.

    Args:
        spent_s: seconds of the steps run so far in this process.
        steps_run: how many steps those are (>= 1).
        budget_s: the budget in seconds; 0 = none (never reached).
    """
    if budget_s <= 0 or steps_run < 1:
        return False
    return spent_s + 0.5 * spent_s / steps_run >= budget_s


def train(
    config: TrainConfig | None, *, resume: Path | None = None, progress: Progress = _no_progress
) -> Path:
    """Run the whole recipe (or continue it from ``resume``'s newest checkpoint); returns the run dir.

    Scale-out (:mod:`agentic_rl.trainer.scale`): with ``scale.num_env_workers`` > 0 the run's envs
    live in Ray env workers started here and shut down at the end (also on error); launched by
    ``torchrun`` with W > 1 processes, each rank trains on its share of every step and only rank
    0 writes the run directory (every rank returns its path).

    Raises:
        AgenticRLError: a wrong env id, model path, run directory or ``[scale]`` setting (see
            :mod:`agentic_rl.errors`); ``resume`` under torchrun.
    """
    if resume is not None:
        if launched_world_size() > 1:
            raise ConfigError(
                "--resume is not supported under torchrun yet; resume with one process"
            )
        checkpoint = latest_checkpoint(resume)
        config = load_config(resume / "config.toml")
        check_scale(config)
    elif config is None:
        raise ValueError("train() needs a config unless it resumes a run")
    else:
        validate(config)  # before the run directory exists: a typo leaves nothing behind
    with scale_out(config) as scale:
        if resume is not None:
            run_dir = resume
        else:
            run_dir = new_run_dir(config.output_dir, config.name) if scale.ctx.is_main else None
            if run_dir is not None:
                save_config(config, run_dir / "config.toml")
            run_dir = broadcast_from_main(run_dir, scale.ctx)
        run = setup(config, run_dir, scale)
        _train(run, resume and checkpoint, progress if scale.ctx.is_main else _no_progress)
    return run_dir


def _train(run: Run, checkpoint: Path | None, progress: Progress) -> None:
    """The recipe's phases on a set-up run (from ``checkpoint`` when resuming)."""
    config, run_dir, main = run.config, run.run_dir, run.scale.ctx.is_main
    resume = checkpoint is not None
    alg = config.algorithm
    optimizer = make_optimizer(run, alg.lr, alg.weight_decay, alg.max_grad_norm)
    if alg.name in CRITIC_ALGORITHMS:
        run.critic = ValueModel(
            hidden_size(run.model), alg.value_lr, next(run.model.parameters()).device
        )
    run.task_pool = make_task_pool(run)
    start = time.perf_counter()
    if resume:
        state = load_checkpoint(checkpoint, run.model, optimizer, run.sampler)
        truncate_after(run_dir, state.rl_step)
        if run.critic is not None:
            _load_value_head(run, checkpoint)
        first_step, run.evals, run.timings = state.rl_step, state.evals, dict(state.extra)
        pool_state = run.timings.pop("task_pool", None)
        if run.task_pool is not None and pool_state:
            run.task_pool.load_state(pool_state)
        progress("resume", state.rl_step, alg.steps, f"resumed at RL step {state.rl_step}")
    else:
        if config.eval.base:
            run_eval(run, "base", 0, progress)
        if config.warmup.enabled:
            warmup(run, progress)
            run_eval(run, "warmup", 0, progress)
        first_step = 0
        _save_checkpoint(run, optimizer, TrainerState(0, run.evals, run.timings))
        if alg.kl_coef > 0 and main:
            save_reference(run.model, run_dir / "checkpoints" / REFERENCE_FILE)
    # ranks > 0 start RL with the same weights as rank 0 and never read its files
    reference = run.run_dir / "checkpoints" / REFERENCE_FILE if main else None
    ref_model = reference_model(run.model, reference) if alg.kl_coef > 0 else None
    rl_started = time.perf_counter()
    done, spent = first_step, 0.0  # spent: seconds of RL steps in this process (evals excluded)
    for step in range(first_step, alg.steps):
        row = rl_step(run, step, optimizer, ref_model)
        done, spent = step + 1, spent + row["perf/step_time_s"]
        progress(
            "rl",
            step + 1,
            alg.steps,
            f"reward {row.get('rollout/reward_total', float('nan')):.3f} success {row['rollout/success']:.0%}",
        )
        last = step + 1 == alg.steps or budget_reached(spent, done - first_step, alg.time_budget_s)
        if config.eval.every and (step + 1) % config.eval.every == 0 and not last:
            run_eval(run, f"rl-step-{step + 1}", step + 1, progress)
        if (step + 1) % config.checkpoint_every == 0 or last:
            run.timings["rl_seconds"] = (
                run.timings.get("rl_seconds", 0.0) + time.perf_counter() - rl_started
            )
            rl_started = time.perf_counter()
            _save_checkpoint(run, optimizer, TrainerState(step + 1, run.evals, run.timings))
        if last:
            break
    run_eval(run, "final", done, progress)
    run.timings["total_seconds_this_process"] = time.perf_counter() - start
    digests = replica_digests(run.model, run.scale.ctx) if run.scale.ctx.distributed else []
    if not main:
        return
    export_model(run)
    write_summary(run, {"world_size": len(digests), "weights_sha256": digests} if digests else None)
    write_report(run_dir)
    run.metrics.close()


def make_task_pool(run: Run) -> TaskPool | None:
    """The run's task pool (None for ``task_sampling = "sequential"``); a candidate's level is read
    from a fresh env's reset info (``info["level"]``); an env without levels is probed once."""
    cfg = run.config
    if cfg.algorithm.task_sampling == "sequential":
        return None
    leveled = [
        True
    ]  # an env whose reset info has no "level" is one level: probed once, then never again

    def level_of(seed: int) -> str:
        if not leveled[0]:
            return ""
        env = make(cfg.env.id, **_replay_kwargs(run))
        try:
            level = env.reset(seed=seed)[1].get("level")
        finally:
            env.close()
        leveled[0] = level is not None
        return "" if level is None else str(level)

    ctx = run.scale.ctx
    return TaskPool(
        seed=cfg.seed * max(ctx.world_size, 1) + ctx.rank,
        seed_start=cfg.env.train_seed_start,
        difficulty=cfg.algorithm.task_sampling == "difficulty",
        level_of=level_of,
    )


def _save_checkpoint(run: Run, optimizer: torch.optim.Optimizer, state: TrainerState) -> None:
    """The run's checkpoint, plus PPO's value head (``value_head.pt``) when there is one (rank 0 only)."""
    if not run.scale.ctx.is_main:
        return
    if run.task_pool is not None:  # the pool's counts and stream position, for --resume
        state = TrainerState(
            state.rl_step, state.evals, {**state.extra, "task_pool": run.task_pool.state()}
        )
    path = save_checkpoint(run.run_dir, run.model, optimizer, run.sampler, state)
    if run.critic is not None:
        run.critic.head.save(path / "value_head.pt", run.critic.optimizer)


def _load_value_head(run: Run, checkpoint: Path) -> None:
    path = checkpoint / "value_head.pt"
    if path.is_file():
        run.critic.head.load(path, run.critic.optimizer)
    else:  # killed between writing the checkpoint and the value head
        log.warning("no value head in %s: PPO's value head restarts from zero", checkpoint)
