"""The training recipe: supervised warm-up on oracle demonstrations, then GRPO on the full task mix.

Read top to bottom, it is the whole data flow of docs/design.md::

    seeds -> env.reset -> rollout engine (policy.generate, tool-call parser, env.step)
          -> trajectories -> rubric -> credit assignment (advantages) -> PPO-clip loss -> optimizer.step()

Phases: (1) greedy evaluation of the base model on held-out seeds; (2) warm-up: supervised
fine-tuning on the env oracle's demonstrations, rendered through the same token-in/token-out
path (loss only on the assistant's tokens); evaluation; checkpoint; (3) RL: each step samples
``tasks_per_step`` tasks × ``group_size`` rollouts from the same seed (sampled by
``rollout.backend``, :mod:`agentic_rl.trainer.sampling.backends`), scores them, assigns
credit with ``algorithm.name`` (group-relative by default; see :mod:`agentic_rl.trainer.learning.credit`
for GiGPO, turn-level credit, REINFORCE++ and PPO with a value head) and takes PPO-clip steps
against the logprobs recorded at sampling (:mod:`agentic_rl.trainer.step`), then syncs
the new weights to the rollout sampler; the per-turn and per-token advantages go into each
stored RL record as ``record["advantages"] = {"turn": [...], "token": [...]}``; periodic
evaluation and checkpoints; with ``algorithm.max_off_policy_steps`` = k >= 1 the batches of
the next steps are sampled by a producer thread while a step trains, at most k policy versions
old (:mod:`agentic_rl.trainer.sampling.async_producer`); (4) final evaluation, the final model as a HF
directory, ``summary.json`` and ``report.html``. ``resume`` continues from the newest
checkpoint with the same optimizer, RNG and step.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config import OptimConfig, TrainConfig, load_run_config, save_config
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.evaluation.held_out import evaluate, is_success, summarize
from agentic_rl.trainer.learning.optim import make_optimizer
from agentic_rl.trainer.learning.reference import REFERENCE_FILE, reference_model, save_reference
from agentic_rl.trainer.learning.update import sft_update
from agentic_rl.trainer.mixture_phases import (
    mixture_demonstrations,
    mixture_eval,
    mixture_summary,
    store_mixture,
    successful_demos,
)
from agentic_rl.trainer.parallel.ranks import Ranks
from agentic_rl.trainer.parallel.scale_out import check_scale, launched_world_size, scale_out
from agentic_rl.trainer.records.checkpoint import latest_checkpoint
from agentic_rl.trainer.records.outputs import export_model, write_summary
from agentic_rl.trainer.records.report import write_report
from agentic_rl.trainer.records.run_checkpoint import resume_run, save_run_checkpoint
from agentic_rl.trainer.records.run_dir import new_run_dir
from agentic_rl.trainer.run import (
    Run,
    env_kwargs,
    permission_kwargs,
    setup,
    store,
    validate,
)
from agentic_rl.trainer.sampling.agent_rollouts import agent_eval, start_agent
from agentic_rl.trainer.sampling.async_producer import rollout_source
from agentic_rl.trainer.sampling.guidance import oracle_episodes
from agentic_rl.trainer.sampling.mixture import env_slots, is_mixture
from agentic_rl.trainer.step import credit_and_update, rl_step
from agentic_rl.types import Trajectory

__all__ = [
    "Run",
    "budget_reached",
    "credit_and_update",
    "env_kwargs",
    "permission_kwargs",
    "prepare_rl",
    "rl_step",
    "run_eval",
    "setup",
    "train",
    "validate",
    "warmup",
]

log = logging.getLogger(__name__)

#: progress callback: (phase, done, total, message); phase "start" (once, first; the message is
#: the run directory, for :func:`~agentic_rl.trainer.records.run_dir.start_line`), "warmup", "resume",
#: "rl" or "eval"
Progress = Callable[[str, int, int, str], None]


def _no_progress(phase: str, done: int, total: int, message: str) -> None:
    pass


def _held_out(run: Run) -> list[Trajectory]:
    """The held-out episodes, greedy: the run's env on ``eval.size`` seeds, or each env of a
    mixture on its own (:func:`~agentic_rl.trainer.mixture_phases.mixture_eval`); rank 0 gets
    every rank's share, other ranks []."""
    cfg = run.config
    if is_mixture(cfg):
        return mixture_eval(run)
    ranks, seeds = run.ranks, range(cfg.eval.seed_start, cfg.eval.seed_start + cfg.eval.size)
    # chunks of max_batch episodes: the KV of more episodes than decode together is memory, not speed
    _, trajectories = evaluate(
        run.policy,
        run.chat,
        cfg.env.id,
        env_kwargs(run),
        ranks.shard(seeds),
        cfg.rollout,
        cfg.reward,
        batch_size=cfg.model.max_batch,
        make_env=run.scale.make_env,
    )
    run.policy.clear_cache()
    # each rank evaluated its share of the seeds; rank 0 reports them all
    return ranks.gather_to_main(trajectories)


def run_eval(run: Run, tag: str, rl_step: int, progress: Progress) -> dict[str, Any]:
    """Greedy evaluation on the held-out seeds; logs and returns the eval row (a mixture's:
    pooled and per env, ``eval/<env id>/success``)."""
    cfg = run.config
    if run.state.agent is not None:  # [agent]: the held-out tasks run through the agent, greedily
        return agent_eval(run, tag, rl_step, progress)
    slots = env_slots(cfg)
    size = sum(s.eval_size for s in slots) if slots else cfg.eval.size
    progress("eval", 0, 1, f"evaluating ({tag}) on {size} held-out tasks")
    started = time.perf_counter()
    trajectories = _held_out(run)
    if not run.ranks.is_main:
        return {}
    metrics = (
        mixture_summary(slots, trajectories, "eval") if slots else summarize(trajectories, "eval")
    )
    seconds = time.perf_counter() - started
    row = {"phase": "eval", "tag": tag, "rl_step": rl_step, "step": rl_step, **metrics}
    row["perf/eval_seconds"] = seconds
    run.metrics.write(row)
    where = {"phase": "eval", "tag": tag, "rl_step": rl_step, "step": rl_step}
    if slots:
        store_mixture(run, trajectories, **where, policy_version=rl_step)
    else:
        store(run, trajectories, **where, policy_version=rl_step)
    run.state.evals.append(row)
    per_env = ", ".join(f"{s.id} {metrics.get(f'eval/{s.id}/success', 0.0):.0%}" for s in slots)
    detail = f" ({per_env})" if per_env else ""
    progress("eval", 1, 1, f"{tag}: success {metrics['eval/success']:.0%}{detail}")
    return row


def oracle_demonstrations(run: Run) -> list[Trajectory]:
    """Roll out the env oracle on the warm-up seeds through the normal token-in/token-out path
    (a mixture: each env's oracle on its own, :func:`~agentic_rl.trainer.mixture_phases.mixture_demonstrations`)."""
    cfg = run.config
    if is_mixture(cfg):
        return mixture_demonstrations(run)
    seeds = run.ranks.shard(
        range(cfg.warmup.seed_start, cfg.warmup.seed_start + cfg.warmup.num_demos)
    )
    kwargs = env_kwargs(run, **cfg.warmup.env_kwargs)
    demos = oracle_episodes(run, seeds, [f"demo-{s}" for s in seeds], kwargs)
    # under torchrun each rank rolled out its share; every rank gets all demos, in seed order
    return run.ranks.all_gather(demos)


def warmup(run: Run, progress: Progress) -> None:
    """Supervised fine-tuning on oracle demonstrations (loss on the assistant's tokens only)."""
    cfg = run.config.warmup
    started = time.perf_counter()
    all_demos = oracle_demonstrations(run)
    mixture = is_mixture(run.config)
    # a demo cut by the rollout budgets would teach a wrong reply: keep only successful ones
    # (in a mixture every env with demonstrations must keep one: successful_demos says which not)
    if mixture:
        demos = successful_demos(run, all_demos)
    else:
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
    if mixture:
        store_mixture(run, demos, warmup=True, phase="warmup", step=0, rl_step=0)
    else:
        store(run, demos, cfg.env_kwargs, phase="warmup", step=0, rl_step=0)
    # the warm-up's AdamW: [warmup] lr, the [optim] defaults otherwise (no decay, clip 1.0)
    optimizer = make_optimizer(run.model.parameters(), OptimConfig(lr=cfg.lr), run.ranks)
    rng = random.Random(run.config.seed)
    total = cfg.epochs * -(-len(demos) // cfg.batch_size)
    step = 0
    for _epoch in range(cfg.epochs):
        order = demos[:]
        rng.shuffle(order)
        for i in range(0, len(order), cfg.batch_size):
            t0 = time.perf_counter()
            stats = run.ranks.update(
                sft_update,
                run.model,
                optimizer,
                run.ranks.shard(order[i : i + cfg.batch_size]),
                micro_batch_size=run.config.optim.micro_batch_size,
                micro_batch_tokens=run.config.optim.micro_batch_tokens,
                precision=run.placement.precision,
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
    run.state.timings["warmup_seconds"] = time.perf_counter() - started


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

    Scale-out (:mod:`agentic_rl.trainer.parallel.scale_out`): with ``scale.num_env_workers`` > 0 the run's envs
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
        config = load_run_config(resume / "config.toml")
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
            run_dir = Ranks(scale.ctx).broadcast_from_main(run_dir)
        if scale.ctx.is_main:  # the run directory (NAME-2 when NAME was taken), before any work
            progress("start", 0, 1, str(run_dir))
        run = setup(config, run_dir, scale)
        try:
            run.state.agent = start_agent(run)  # [agent]: the policy server the agent calls
            _train(run, resume and checkpoint, progress if scale.ctx.is_main else _no_progress)
        finally:  # a vLLM server stops at the end and on any failure
            if run.state.agent is not None:
                run.state.agent.close()
            run.state.backend.close()
    return run_dir


def prepare_rl(run: Run) -> torch.optim.Optimizer:
    """The RL phase's optimizer on a :func:`setup` run (``[optim]``: AdamW, its warm-up schedule
    and clipping; PPO's critic and the task pool are already on the run).

    :func:`train` calls it before the warm-up; whatever drives :func:`rl_step` itself (the
    benchmarks) calls it too, so it steps a run set up exactly as the recipe's.
    """
    return make_optimizer(run.model.parameters(), run.config.optim, run.ranks)


def _train(run: Run, checkpoint: Path | None, progress: Progress) -> None:
    """The recipe's phases on a set-up run (from ``checkpoint`` when resuming)."""
    config, run_dir, main = run.config, run.run_dir, run.ranks.is_main
    alg = config.algorithm
    optimizer = prepare_rl(run)
    start = time.perf_counter()
    if checkpoint is not None:
        first_step = resume_run(run, optimizer, checkpoint)
        progress("resume", first_step, alg.steps, f"resumed at RL step {first_step}")
    else:
        if config.eval.base:
            run_eval(run, "base", 0, progress)
        if config.warmup.enabled:
            warmup(run, progress)
            run_eval(run, "warmup", 0, progress)
        first_step = 0
        save_run_checkpoint(run, optimizer, 0)
        if config.loss.kl_coef > 0 and main:
            save_reference(run.model, run_dir / "checkpoints" / REFERENCE_FILE)
    # ranks > 0 start RL with the same weights as rank 0 and never read its files
    reference = run.run_dir / "checkpoints" / REFERENCE_FILE if main else None
    ref_model = reference_model(run.model, reference) if config.loss.kl_coef > 0 else None
    run.state.backend.sync(run.model, first_step)  # the rollout sampler starts from the RL weights
    with rollout_source(run, first_step) as rollouts:  # k >= 1: a producer thread samples ahead
        done = _rl_steps(run, first_step, optimizer, ref_model, rollouts, progress)
    run_eval(run, "final", done, progress)
    run.state.timings["total_seconds_this_process"] = time.perf_counter() - start
    digests = run.ranks.replica_digests(run.model)
    if not main:
        return
    export_model(run)
    write_summary(run, {"world_size": len(digests), "weights_sha256": digests} if digests else None)
    write_report(run_dir)
    run.metrics.close()


def _rl_steps(run: Run, first_step: int, optimizer, ref_model, rollouts, progress: Progress) -> int:
    """The RL loop from ``first_step``: steps, periodic evals and checkpoints, until
    ``algorithm.steps`` or the time budget; returns the RL steps done."""
    config, alg = run.config, run.config.algorithm
    rl_started = time.perf_counter()
    done, spent = first_step, 0.0  # spent: seconds of RL steps in this process (evals excluded)
    for step in range(first_step, alg.steps):
        row = rl_step(run, step, optimizer, ref_model, rollouts)
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
            run.state.timings["rl_seconds"] = (
                run.state.timings.get("rl_seconds", 0.0) + time.perf_counter() - rl_started
            )
            rl_started = time.perf_counter()
            save_run_checkpoint(run, optimizer, step + 1)
        if last:
            break
    return done
