"""Generation workers: whole episodes sampled in Ray actors, each with its own copy of the policy.

The trainer keeps the trainable model; each of N generation-worker actors
(:class:`GenerationWorkerPool`) holds a sampling copy of it (the local sampler of ``[model]``:
:class:`~agentic_rl.policy.fast.FastPolicy` or ``HFPolicy``), builds its own env instances and
runs the unchanged rollout engine (:func:`~agentic_rl.rollout.run_episodes`) on its shard of a
batch. This is the layout of verl's and SkyRL's rollout workers: rollouts spread over the
machines of a Ray cluster while the trainer trains on its own::

    pool = GenerationWorkerPool(2, build_model, tokenizer, model_config)   # actors start here
    pool.sync(model.state_dict(), version=0)            # weights in, put once in the object store
    trajectories = pool.rollout("calculator-v0", {}, seeds, group_ids, rollout_config,
                                sample_seed=1234)       # every episode, in the order asked
    ...                                                 # train, then pool.sync(new_weights, 1)
    pool.shutdown()

Sharding. A batch is cut into one contiguous shard per live worker at group boundaries (the G
episodes of a task stay on one worker, so a sampler that shares their prompt's KV still can).
With ``sample_seed`` each episode's sampling seeds are those of its index in the whole batch
(``run_episodes(first_index=...)``), so the seeds do not depend on the number of workers.

Weights. :meth:`GenerationWorkerPool.sync` puts the tensors into Ray's object store **once** and
every actor loads the same object (``load_state_dict``, in place: the fast sampler's fused copy
notices the new tensor versions and refreshes itself); the actor then records ``version``, and
every trajectory it returns is stamped with it (``Trajectory.policy_version``). A LoRA run sends
the whole model at the first sync and only the trainable parameters after it (the trainer's
``GenerationWorkersBackend`` decides; the pool loads whatever names it is given).

Failures. A worker that dies, or does not answer a round within ``timeout_s``, is dropped
(killed if it hung) and its shard comes back as failed trajectories (``StopReason.ERROR``,
``failure`` naming the worker and the cause, no tokens: excluded from training), as env workers
fail their episodes (:mod:`agentic_rl.rollout.env_workers`); later rounds and syncs go to the
live workers only. A round whose call raises in a worker fails that shard the same way but keeps
the worker; a weight load that raises drops it (its weights are then unknown). Only when no
worker is left does a call raise :class:`GenerationWorkerError`. (An env that raises fails its
own episode inside the engine, as anywhere.)

Each trajectory's ``info`` holds ``generation_worker`` (the worker's index),
``generation_worker_pid`` and ``generation_worker_host``.

Requires the optional extra ``ray`` (``pip install 'agentic-rl[ray]'``, Ray 2.60).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from agentic_rl.rollout.engine import RolloutConfig, run_episodes
from agentic_rl.rollout.env_workers import require_ray
from agentic_rl.rollout.ray_local import init_ray
from agentic_rl.types import StopReason, Trajectory

__all__ = [
    "EpisodeShard",
    "GenerationWorker",
    "GenerationWorkerError",
    "GenerationWorkerPool",
    "shard_by_group",
]

log = logging.getLogger(__name__)


class GenerationWorkerError(RuntimeError):
    """No generation worker can serve the call (all died), or a call came before any weights."""


def _ray():
    return require_ray("generation workers")


@dataclass(frozen=True)
class EpisodeShard:
    """One worker's part of a rollout round (picklable; shipped to the actor).

    Attributes:
        env: a registered env id, or a picklable factory returning an env.
        env_kwargs: constructor arguments of every env of the shard.
        seeds, group_ids: ``reset`` seed and group id of each episode (same length).
        config: budgets and temperature (``[rollout]``).
        sample_seed: the round's sampling seed (None: the worker's own RNG).
        first_index: index of the shard's first episode in the whole round (for the seeds).
        env_workers: threads stepping envs while decoding (see ``run_episodes``).
    """

    env: Any
    env_kwargs: Mapping[str, Any]
    seeds: tuple[int, ...]
    group_ids: tuple[str, ...]
    config: RolloutConfig
    sample_seed: int | None = None
    first_index: int = 0
    env_workers: int = 4


class GenerationWorker:
    """Body of one generation-worker actor: a sampling copy of the policy and the rollout engine.

    Args:
        index: the worker's index in its pool (recorded on its trajectories).
        build_model: picklable callable returning the model to sample with (same parameter
            names as the trainer's model; its initial values do not matter, :meth:`load_weights`
            sets them).
        tokenizer: the run's HF tokenizer (pickled to the actor).
        model_config: the ``[model]`` section (``sampler``, ``max_batch``, ``sampler_dtype``).
        seed: seed of the sampler's own RNG (used when a round has no ``sample_seed``).
        num_threads: torch CPU threads of this actor.
    """

    def __init__(
        self,
        index: int,
        build_model: Callable[[], Any],
        tokenizer: Any,
        model_config: Any,
        seed: int = 0,
        num_threads: int = 1,
    ) -> None:
        import torch

        from agentic_rl.policy.chat_template import chat_for_model
        from agentic_rl.policy.fast import make_policy_from_config

        torch.set_num_threads(max(1, int(num_threads)))
        self.index = index
        self.model = build_model().eval()
        self.model.requires_grad_(False)
        self.chat = chat_for_model(tokenizer, model_config)
        self.policy = make_policy_from_config(
            self.model,
            model_config,
            self.chat.eos_token_id,
            tokenizer.pad_token_id,
            generator=torch.Generator().manual_seed(seed),
        )
        self.version: int | None = None

    def load_weights(self, weights: Mapping[str, Any], version: int) -> float:
        """Copy ``weights`` (parameter name -> tensor, all or some of the model's) into the
        model in place and record ``version``; returns the seconds it took.

        Raises:
            KeyError: a name the model does not have (nothing is half-loaded silently).
        """
        started = time.perf_counter()
        result = self.model.load_state_dict(dict(weights), strict=False)
        if result.unexpected_keys:
            raise KeyError(f"weights the model does not have: {result.unexpected_keys[:3]}")
        clear = getattr(self.policy, "clear_cache", None)
        if clear is not None:
            clear()  # no KV computed with the old weights is reused
        self.version = int(version)
        return time.perf_counter() - started

    def rollout(self, shard: EpisodeShard) -> list[Trajectory]:
        """Run the shard's episodes to the end (envs built here, closed after) and return their
        unscored trajectories, stamped with this worker's version, in order.

        Raises:
            GenerationWorkerError: no weights were loaded yet.
        """
        if self.version is None:
            raise GenerationWorkerError(f"generation worker {self.index}: no weights loaded yet")
        from agentic_rl.envs import make

        build = partial(make, shard.env) if isinstance(shard.env, str) else shard.env
        envs: list[Any] = []
        try:
            for _ in shard.seeds:
                envs.append(build(**shard.env_kwargs))
            trajectories = run_episodes(
                self.policy,
                self.chat,
                envs,
                shard.seeds,
                shard.group_ids,
                shard.config,
                sample_seed=shard.sample_seed,
                env_workers=shard.env_workers,
                first_index=shard.first_index,
            )
        finally:
            for env in envs:
                env.close()
            clear = getattr(self.policy, "clear_cache", None)
            if clear is not None:
                clear()
        where = {
            "generation_worker": self.index,
            "generation_worker_pid": os.getpid(),
            "generation_worker_host": socket.gethostname(),
        }
        return [
            dataclasses.replace(
                t,
                info={**t.info, **where},
                policy_version=self.version if t.policy_version is None else t.policy_version,
            )
            for t in trajectories
        ]

    def describe(self) -> dict[str, Any]:
        """``{"index", "pid", "host", "version"}`` of this worker (version None before weights)."""
        return {
            "index": self.index,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "version": self.version,
        }


def shard_by_group(group_ids: Sequence[str], parts: int) -> list[range]:
    """Cut ``range(len(group_ids))`` into at most ``parts`` contiguous, non-empty shards whose
    boundaries fall where the group id changes, as even in episodes as the groups allow.

    Example: ``["a", "a", "b", "b", "c", "c"]`` in 2 parts -> ``[range(0, 4), range(4, 6)]``
    (a shard holds whole groups; 3 groups of 2 cannot split 3/3).

    Raises:
        ValueError: ``parts`` < 1.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    n = len(group_ids)
    starts = [i for i in range(n) if i == 0 or group_ids[i] != group_ids[i - 1]]
    cuts, shards, begin = starts[1:], [], 0
    for k in range(1, parts):
        if begin >= n:
            break
        target = round(k * n / parts)
        candidates = [c for c in cuts if c > begin]
        if not candidates:
            break
        cut = min(candidates, key=lambda c: (abs(c - target), -c))  # a tie: the later cut
        if cut >= n:
            break
        shards.append(range(begin, cut))
        begin = cut
    if begin < n:
        shards.append(range(begin, n))
    return shards


def _summary(exc: BaseException, limit: int = 300) -> str:
    """One line of at most ``limit`` characters: from the first ``XxxError:`` line of the
    message on (the exception an actor's ``__init__`` raised, after Ray's traceback), else the
    message's start."""
    lines = str(exc).splitlines()
    pattern = re.compile(r"[\w.]*(Error|Exception)\b")  # e.g. "agentic_rl.errors.XError: ..."
    at = [i for i, line in enumerate(lines) if pattern.match(line.strip())]
    text = " ".join(" ".join(lines[at[0] :] if at else lines).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failed_trajectories(
    env_id: str, seeds: Sequence[int], group_ids: Sequence[str], reason: str, worker: int
) -> list[Trajectory]:
    """Trajectories of episodes that never ran (their worker failed): no tokens,
    ``StopReason.ERROR``, ``failure = reason`` (excluded from training)."""
    return [
        Trajectory(
            env_id=env_id,
            seed=int(seed),
            group_id=str(gid),
            trajectory_id=uuid.uuid4().hex,
            messages=(),
            turns=(),
            token_ids=(),
            loss_mask=(),
            logprobs=(),
            stop_reason=StopReason.ERROR,
            info={"generation_worker": worker},
            failure=reason,
        )
        for seed, gid in zip(seeds, group_ids)
    ]


class GenerationWorkerPool:
    """N generation-worker actors in a Ray cluster (this process must already be connected to
    Ray, or a private local Ray is started on loopback, with token authentication:
    :func:`agentic_rl.rollout.ray_local.init_ray`).

    Args:
        num_workers: number of actors (>= 1).
        build_model: picklable callable returning the sampling model (see :class:`GenerationWorker`).
        tokenizer: the run's tokenizer. model_config: ``[model]`` (sampler settings).
        seed: base seed of the workers' own RNGs (worker i uses ``seed + i``).
        cpus_per_worker: CPUs each actor reserves in Ray's scheduler (fractions allowed); its
            torch threads are ``num_threads`` or, when 0, max(1, floor(cpus_per_worker)).
        timeout_s: wall-clock limit of one round on one worker, and of one weight load.
        num_threads: torch threads per actor (0: from ``cpus_per_worker``).

    Attributes:
        actors: the Ray actor handles. alive: indices of the workers still in use.
        causes: why each dropped worker was dropped. version: of the latest sync (None before).
        workers: ``describe()`` of each worker at start (pid, host).

    Raises:
        ValueError: ``num_workers`` < 1 or ``timeout_s`` <= 0.
        AgenticRLError: Ray is not installed.
        GenerationWorkerError: an actor failed to start (its error kept; the others are killed).
    """

    def __init__(
        self,
        num_workers: int,
        build_model: Callable[[], Any],
        tokenizer: Any,
        model_config: Any,
        *,
        seed: int = 0,
        cpus_per_worker: float = 1.0,
        timeout_s: float = 1800.0,
        num_threads: int = 0,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        ray = _ray()
        if not ray.is_initialized():
            init_ray()
        threads = num_threads or max(1, int(cpus_per_worker))
        actor_cls = ray.remote(num_cpus=cpus_per_worker, max_restarts=0)(GenerationWorker)
        self.timeout_s = float(timeout_s)
        self.actors = [
            actor_cls.remote(i, build_model, tokenizer, model_config, seed + i, threads)
            for i in range(num_workers)
        ]
        self.alive = set(range(num_workers))
        self.causes: dict[int, str] = {}  # why each dead worker was dropped
        self.version: int | None = None  # of the latest sync; None before the first
        try:
            self.workers = self._call_all("describe", ())
        except BaseException:
            self.shutdown()
            raise
        if len(self.alive) < num_workers:
            causes = "; ".join(self.causes.values())
            self.shutdown()
            raise GenerationWorkerError(f"generation workers failed to start: {causes}")

    @property
    def num_workers(self) -> int:
        """N, the number of actors started (live or not)."""
        return len(self.actors)

    def _drop(self, index: int, cause: str) -> None:
        """Mark worker ``index`` dead (killing it, in case it hangs) with ``cause``."""
        if index not in self.alive:
            return
        self.alive.discard(index)
        self.causes[index] = f"generation worker {index}: {cause}"
        log.warning("generation worker %d dropped: %s", index, cause)
        try:
            _ray().kill(self.actors[index])
        except Exception:  # noqa: BLE001 - already gone
            pass

    def _wait(self, refs: dict[int, Any], *, drop_raising: bool) -> tuple[dict, dict]:
        """Wait up to ``timeout_s`` for each worker's ref. Workers that died or time out are
        dropped; those whose call raised too when ``drop_raising`` (their state is unknown).
        Returns ``(results, failures)``, both by worker index (a failure is its reason)."""
        ray = _ray()
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.timeout_s)
        ready_ids = {r.hex() for r in ready}
        out, failed = {}, {}
        for index, ref in refs.items():
            if ref.hex() not in ready_ids:
                self._drop(index, f"no answer within {self.timeout_s:g} s")
                failed[index] = self.causes[index]
                continue
            try:
                out[index] = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                failed[index] = f"generation worker {index}: raised {type(cause).__name__}: {cause}"
                if drop_raising:
                    self._drop(index, f"raised {type(cause).__name__}: {cause}")
            except ray.exceptions.RayError as exc:  # dead actor, lost object, ...
                self._drop(index, f"died: {type(exc).__name__}: {_summary(exc)}")
                failed[index] = self.causes[index]
        return out, failed

    def _call_all(self, method: str, args: tuple) -> dict[int, Any]:
        refs = {i: getattr(self.actors[i], method).remote(*args) for i in sorted(self.alive)}
        return self._wait(refs, drop_raising=True)[0]

    def _need_alive(self, what: str) -> list[int]:
        if not self.alive:
            causes = "; ".join(self.causes[i] for i in sorted(self.causes)) or "none started"
            raise GenerationWorkerError(f"{what}: no generation worker is alive ({causes})")
        return sorted(self.alive)

    def sync(self, weights: Mapping[str, Any], version: int) -> float:
        """Put ``weights`` (name -> CPU tensor) into the object store once and load them into
        every live worker; they then sample as policy ``version``. Returns the seconds from the
        put to the last worker's answer. A worker that fails is dropped.

        Raises:
            GenerationWorkerError: no worker is alive (before or after the load).
        """
        self._need_alive(f"weight sync v{version}")
        started = time.perf_counter()
        ref = _ray().put(dict(weights))
        self._call_all("load_weights", (ref, int(version)))
        self._need_alive(f"weight sync v{version}")
        self.version = int(version)
        return time.perf_counter() - started

    def rollout(
        self,
        env: Any,
        env_kwargs: Mapping[str, Any],
        seeds: Sequence[int],
        group_ids: Sequence[str],
        config: RolloutConfig,
        *,
        sample_seed: int | None = None,
        env_workers: int = 4,
    ) -> list[Trajectory]:
        """Run one episode per seed on the live workers (one contiguous shard of whole groups
        each, :func:`shard_by_group`) and return the trajectories in the order of ``seeds``.
        The episodes of a worker that fails during the round come back failed (module doc).

        Args:
            env: a registered env id or a picklable env factory. env_kwargs: its arguments.
            seeds, group_ids: one per episode (same length).
            config: budgets and temperature. sample_seed: as in ``run_episodes``.
            env_workers: env-stepping threads in each worker.

        Raises:
            ValueError: ``seeds`` and ``group_ids`` differ in length.
            GenerationWorkerError: no worker is alive, or no weights were synced yet.
        """
        if self.version is None:
            raise GenerationWorkerError("rollout: no weights synced yet (call sync first)")
        if len(seeds) != len(group_ids):
            raise ValueError("seeds and group_ids must have the same length")
        if not seeds:
            return []
        workers = self._need_alive("rollout")
        shards = shard_by_group(list(group_ids), len(workers))
        refs = {}
        for worker, part in zip(workers, shards):
            shard = EpisodeShard(
                env,
                dict(env_kwargs),
                tuple(int(seeds[i]) for i in part),
                tuple(str(group_ids[i]) for i in part),
                config,
                sample_seed,
                part.start,
                env_workers,
            )
            refs[worker] = self.actors[worker].rollout.remote(shard)
        # an episode's own errors are already failed trajectories; a raising call is a bug in
        # the worker's code for this shard: its episodes fail, the worker stays in use
        results, failures = self._wait(refs, drop_raising=False)
        env_id = env if isinstance(env, str) else getattr(env, "__name__", "")
        out: list[Trajectory] = []
        for worker, part in zip(workers, shards):
            if worker in results:
                out.extend(results[worker])
            else:
                out.extend(
                    failed_trajectories(
                        env_id,
                        [seeds[i] for i in part],
                        [group_ids[i] for i in part],
                        failures[worker],
                        worker,
                    )
                )
        return out

    def shutdown(self) -> None:
        """Kill every actor (their models and envs go with them). Ray itself stays up. Idempotent."""
        ray = _ray()
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors, self.alive = [], set()
