"""A run's checkpoints as the recipe writes and resumes them: the model, optimizer and RNG states
(:mod:`agentic_rl.trainer.records.checkpoint`), plus the task pool's state and PPO's value head.
"""

from __future__ import annotations

import torch

from agentic_rl.trainer.records.checkpoint import (
    CheckpointProgress,
    load_checkpoint,
    save_checkpoint,
)
from agentic_rl.trainer.records.run_dir import truncate_after
from agentic_rl.trainer.run import Run

__all__ = ["resume_run", "save_run_checkpoint"]


def save_run_checkpoint(run: Run, optimizer: torch.optim.Optimizer, rl_step: int) -> None:
    """Checkpoint the run after ``rl_step`` RL steps (rank 0 only): weights, optimizer, RNGs,
    evals and timings; the task pool's counts and stream position (in ``extra["task_pool"]``);
    and PPO's value head (``value_head.pt``) when there is one."""
    if not run.ranks.is_main:
        return
    extra = dict(run.state.timings)
    if run.task_pool is not None:  # the pool's counts and stream position, for --resume
        extra["task_pool"] = run.task_pool.state()
    progress = CheckpointProgress(rl_step, run.state.evals, extra)
    path = save_checkpoint(run.run_dir, run.model, optimizer, run.sampler, progress)
    if run.critic is not None:
        run.critic.save(path)


def resume_run(run: Run, optimizer: torch.optim.Optimizer, checkpoint) -> int:
    """Restore ``checkpoint`` into the run (weights, optimizer, RNGs, evals, timings, task pool,
    value head) and drop the run directory's rows and shards written after it.

    Returns:
        the RL step to continue from.

    Raises:
        RunDirError: the checkpoint does not fit the run (see ``load_checkpoint``).
    """
    progress = load_checkpoint(checkpoint, run.model, optimizer, run.sampler)
    truncate_after(run.run_dir, progress.rl_step)
    if run.critic is not None:
        run.critic.load(checkpoint)
    run.state.evals, run.state.timings = progress.evals, dict(progress.extra)
    pool_state = run.state.timings.pop("task_pool", None)
    if run.task_pool is not None and pool_state:
        run.task_pool.load_state(pool_state)
    return progress.rl_step
