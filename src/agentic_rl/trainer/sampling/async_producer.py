"""Async training: the rollouts of the next RL steps are sampled while the current step trains.

``algorithm.max_off_policy_steps`` = k. With k = 0 (the default) every RL step samples its
batch, then trains on it (:class:`InlineRollouts`, exactly the synchronous loop). With k >= 1
(:class:`AsyncRollouts`) a producer thread samples the batches of steps s, s + 1, … ahead of
the trainer (torch releases the GIL in its kernels, so sampling and the update overlap on the
CPU's cores or on one GPU), from its own copy of the weights
(:class:`~agentic_rl.trainer.sampling.async_sampler.AsyncBackend`; the vLLM server for ``vllm``).

Versions and staleness. The trainer is at version s when it takes the batch of step s (s
updates done); after the update it syncs version s + 1 to the sampler. The producer starts
the batch of step s only once the sampler holds version s − k or later, so it runs at most k
steps ahead; episodes in flight at a sync continue on the new weights (partial rollouts), and
every token records the version that sampled it (``Trajectory.token_versions``; the oldest is
``Trajectory.policy_version``). When the trainer takes a batch, every trajectory whose oldest
token is older than s − k is dropped from training (:func:`drop_stale`; stored, not trained,
counted in ``rollout/dropped_stale``): the guarantee does not rest on the schedule alone.
``rollout/staleness_mean`` / ``_max`` log s − oldest version; with k = 1 they lie in [0, 1].

Off-policy correction (the decision). Without ``loss.tis_cap`` / ``mis_*`` the PPO ratio is
taken against the logprobs μ the sampler recorded for each token, i.e. against the version
that sampled it: a stale token's ratio starts away from 1 and the clip bounds the move from
the behaviour policy (standard PPO importance sampling, exact per token for partial rollouts).
With ``loss.tis_cap`` or ``mis_*`` on, the trainer recomputes π_old with its own weights at the
start of the step (decoupled PPO, :mod:`agentic_rl.trainer.learning.mismatch_correction`; AReaL's
choice): the clip measures the trainer's own move and the TIS weight min(π_old / μ, cap)
corrects the staleness (and the sampler's numerics). That is the recommended setting for
k >= 1, since a clip against a k-step-old μ cuts more tokens as k grows.

With k >= 1: dynamic sampling (its rounds run in the producer, later rounds on newer
weights), oracle guidance (scored with the sampler's copy, ``local`` only), the task pool
(locked: checkpoints read it while the producer draws) and checkpoint/resume work; a resumed
run restarts the producer at its checkpoint's step (batches sampled ahead are not saved, so
it is not bit-identical to an uninterrupted run, and the pool has already advanced by the
draws of those batches). Rejected at load (:func:`~agentic_rl.config.algorithm.check_off_policy`):
``rollout.backend = "openai"`` (never synced), ``vllm`` with LoRA or guidance; at start:
torchrun with more than one process. ``perf/rollout_time_s`` is the trainer's wait for its
batch (0 when the producer was ahead), not the sampling time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator

import torch

from agentic_rl.errors import ConfigError
from agentic_rl.policy.fast import make_policy_from_config
from agentic_rl.trainer.run import Run
from agentic_rl.trainer.sampling.async_sampler import AsyncBackend, ProducerStopped, sampler_copy
from agentic_rl.trainer.sampling.rollouts import sample_step
from agentic_rl.trainer.sampling.task_pool import SampledBatch

__all__ = ["AsyncRollouts", "InlineRollouts", "drop_stale", "rollout_source"]

log = logging.getLogger(__name__)

#: seconds :meth:`AsyncRollouts.close` waits for the producer thread to end
JOIN_TIMEOUT_S = 120.0


def drop_stale(batch: SampledBatch, version: int, k: int) -> SampledBatch:
    """``batch`` without the trajectories to train on whose oldest token's version is below
    ``version − k`` (moved to ``dropped``, counted in ``stale``); unversioned ones are kept.

    Args:
        version: the trainer's policy version when it takes the batch (RL steps done).
        k: ``algorithm.max_off_policy_steps``.
    """
    floor = version - k
    stale = [t for t in batch.train if t.policy_version is not None and t.policy_version < floor]
    if not stale:
        return batch
    gone = {id(t) for t in stale}
    return dataclasses.replace(
        batch,
        train=[t for t in batch.train if id(t) not in gone],
        dropped=batch.dropped + stale,
        stale=batch.stale + len(stale),
    )


class InlineRollouts:
    """k = 0: each step's batch is sampled when the trainer asks for it (the synchronous loop)."""

    def __init__(self, run: Run):
        self.run = run

    def batch(self, step: int) -> SampledBatch:
        """The scored rollouts of RL step ``step`` (:func:`~agentic_rl.trainer.sampling.rollouts.sample_step`)."""
        return sample_step(self.run, step)

    def close(self) -> None:
        """Nothing to stop."""


class AsyncRollouts:
    """k >= 1: a producer thread samples the batches of steps ``first_step`` … ``last_step − 1``
    at most k versions ahead (module docstring).

    Args:
        view: the run as the producer sees it (``backend`` the :class:`AsyncBackend`, ``model``
            the sampler's copy for ``local``).
        first_step, last_step: the RL steps to sample (``range(first_step, last_step)``).
        k: ``algorithm.max_off_policy_steps`` (>= 1).
        sample: samples one step's batch (None: ``sample_step``).
    """

    def __init__(
        self,
        view: Run,
        first_step: int,
        last_step: int,
        k: int,
        sample: Callable[[Run, int], SampledBatch] | None = None,
    ):
        if k < 1:
            raise ValueError(f"AsyncRollouts needs k >= 1, got {k}")
        self.view, self.k, self.sample = view, k, sample or sample_step
        self.backend: AsyncBackend = view.state.backend
        self._steps = range(first_step, last_step)
        self._ready: dict[int, SampledBatch] = {}
        self._error: BaseException | None = None
        self._done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._produce, name="rollout-producer", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        try:
            for step in self._steps:
                self.backend.gate.wait_for(step - self.k)  # at most k versions ahead
                batch = self.sample(self.view, step)
                with self._cond:
                    self._ready[step] = batch
                    self._cond.notify_all()
        except ProducerStopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer's thread
            log.debug("the rollout producer failed", exc_info=True)
            with self._cond:
                self._error = exc
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def batch(self, step: int) -> SampledBatch:
        """The batch of RL step ``step`` (waits for it), without its stale trajectories.

        Raises:
            BaseException: whatever the producer raised (the same exception object).
            RuntimeError: the producer ended without this step's batch.
        """
        with self._cond:
            while step not in self._ready and not self._done:
                self._cond.wait()
            if step in self._ready:
                batch = self._ready.pop(step)
            elif self._error is not None:
                raise self._error
            else:
                raise RuntimeError(f"the rollout producer ended before RL step {step}")
        return drop_stale(batch, step, self.k)

    @property
    def alive(self) -> bool:
        """Whether the producer thread is still running."""
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop the producer (its decode step or wait in progress raises ProducerStopped, the
        round's envs close) and wait for its thread; idempotent."""
        self.backend.stop()
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning("the rollout producer did not stop within %.0f s", JOIN_TIMEOUT_S)


def _async_backend(run: Run) -> AsyncBackend:
    """The run's backend wrapped for a producer thread (``local``: a copy of the weights)."""
    if run.state.backend.name != "local":
        return AsyncBackend(run.state.backend)
    cfg = run.config

    def make_policy(model):
        generator = torch.Generator().manual_seed(cfg.seed + 1)
        return make_policy_from_config(
            model, cfg.model, run.chat.eos_token_id, run.tokenizer.pad_token_id, generator
        )

    return AsyncBackend(run.state.backend, sampler_copy(run.model), make_policy)


@contextlib.contextmanager
def rollout_source(run: Run, first_step: int) -> Iterator[InlineRollouts | AsyncRollouts]:
    """Where the RL steps from ``first_step`` on get their batches: inline for k = 0, else a
    producer thread (stopped when the block ends, also on error). Call after the first sync;
    with k >= 1 ``run.state.backend`` becomes the :class:`AsyncBackend` (``run.state.backend.close()``
    still closes the run's backend).

    Raises:
        ConfigError: k >= 1 under torchrun with more than one process.
    """
    k = run.config.algorithm.max_off_policy_steps
    if run.state.agent is not None:  # [agent]: runs of the user's agent (check_agent: k = 0)
        from agentic_rl.trainer.sampling.agent_rollouts import AgentRollouts

        yield AgentRollouts(run)
        return
    if k == 0:
        yield InlineRollouts(run)
        return
    if run.ranks.world_size > 1:  # trainer.run.validate rejects it before any work
        raise ConfigError("algorithm.max_off_policy_steps >= 1 is not supported under torchrun yet")
    run.state.backend = backend = _async_backend(run)
    view = dataclasses.replace(run, model=run.model if backend.model is None else backend.model)
    producer = AsyncRollouts(view, first_step, run.config.algorithm.steps, k)
    try:
        yield producer
    finally:
        producer.close()
