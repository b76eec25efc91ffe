"""Scale-out of the training recipe: envs in Ray env workers, and data-parallel ranks under torchrun.

Two independent switches, both off by default (then the recipe runs exactly as on one process):

* **Env workers** (``[scale] num_env_workers = N``, ``agentic-rl train --num-env-workers N
  [--ray-address ADDR]``): every env instance of the run (warm-up demonstrations, RL rollouts,
  evaluations) is a :class:`~agentic_rl.rollout.env_workers.RemoteEnv` proxy into one
  :class:`~agentic_rl.rollout.env_workers.EnvWorkerPool` of N Ray actors, started once per run
  and shut down at its end, also when the run fails. ``ray_address`` joins a running cluster
  (``auto``, ``host:port``, ``ray://host:port``); empty starts a private local Ray for the run,
  listening on loopback only, with token authentication (:mod:`agentic_rl.rollout.ray_local`).
  Generation stays in the trainer process. With the continuous decode schedule (the default
  ``fast`` sampler) the rollout engine runs env steps on worker threads, so steps of different
  episodes are in flight together (one at a time per actor).
* **Generation workers** (``[scale] num_generation_workers = M``, ``agentic-rl train
  --num-generation-workers M``): the RL rollouts run as whole episodes in M Ray actors, each
  with its own copy of the policy and its own envs
  (:mod:`agentic_rl.rollout.generation_workers`, built by
  :func:`agentic_rl.trainer.sampling.backends.make_backend`); after every RL step the trainer pushes its
  weights to them. Ray is started (or joined) here as for env workers; the workers are killed
  when the run's backend closes, before this module stops Ray. Only with ``rollout.backend =
  "local"``, ``algorithm.max_off_policy_steps = 0`` and one process (:func:`check_scale`).
* **Data parallel** (``torchrun --nproc-per-node W -m agentic_rl.cli train …``): W ranks each
  roll out a contiguous share of each step's tasks (a group never spans ranks, so group
  baselines are exact), run the unchanged update on it, and average gradients weighted by each
  rank's loss normaliser before the optimizer step (:mod:`agentic_rl.trainer.parallel.distributed`), so
  every rank applies the update one process would. Warm-up batches and eval seeds are sharded
  the same way. Only rank 0 writes the run directory (config, metrics, trajectories of all
  ranks, gathered to it, checkpoints, evaluation, report); at the end the ranks compare SHA-256
  digests of their weights and the run fails if they differ.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from agentic_rl.envs import Env, make
from agentic_rl.errors import AgenticRLError, ConfigError
from agentic_rl.rollout.ray_local import init_ray
from agentic_rl.trainer.parallel.distributed import DistContext, init_distributed

#: seconds to wait for a TCP connection to ``scale.ray_address`` before calling it unreachable
CONNECT_TIMEOUT_S = 5.0

#: credit assignment that needs more than one rank's groups (not supported under torchrun yet)
_NOT_DATA_PARALLEL = {
    "ppo": "its value head is not synchronised across ranks",
    "reinforce_pp": "it whitens advantages over the whole step's batch, which no rank holds",
}


def launched_world_size() -> int:
    """W of the ``torchrun`` launch this process belongs to (``WORLD_SIZE``; 1 for a plain launch)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ConfigError(
            f"WORLD_SIZE must be an integer, got {os.environ['WORLD_SIZE']!r}"
        ) from None


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; None for ``auto``.

    Raises:
        ConfigError: any other form.
    """
    if address == "auto":
        return None
    rest = address[len("ray://") :] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"scale.ray_address must be 'auto', 'host:port' or 'ray://host:port', got {address!r}"
        )
    return host.strip("[]"), int(port)


def _check_generation_workers(config: Any) -> None:
    """Refuse what Ray generation workers do not support (yet).

    Raises:
        ConfigError: ``rollout.backend`` other than ``local``; ``algorithm.max_off_policy_steps``
            >= 1; a torchrun launch with W > 1.
    """
    if config.rollout.backend != "local":
        raise ConfigError(
            f"scale.num_generation_workers > 0 needs rollout.backend = 'local', got "
            f"{config.rollout.backend!r}: a server backend already samples outside the trainer "
            "(start more servers instead)"
        )
    if config.algorithm.max_off_policy_steps:
        raise ConfigError(
            "scale.num_generation_workers > 0 is not supported with "
            "algorithm.max_off_policy_steps >= 1 yet (the async producer samples in the trainer)"
        )
    if launched_world_size() > 1:
        raise ConfigError(
            "scale.num_generation_workers > 0 is not supported under torchrun yet "
            "(each rank would start its own workers); train with one process"
        )


def check_scale(config: Any) -> None:
    """Check ``[scale]`` and the launch before any work: Ray installed, cluster reachable,
    algorithm supported under ``torchrun``.

    Raises:
        ConfigError: Ray missing while ``num_env_workers`` or ``num_generation_workers`` > 0;
            generation workers with a server backend, async training or torchrun;
            ``ray_address`` malformed or
            nothing accepts a TCP connection there within ``CONNECT_TIMEOUT_S``; a data-parallel
            launch (W > 1) with credit that needs the whole step's batch on one process
            (``ppo``, ``reinforce_pp``, ``grpo`` with ``std_scope = "batch"``).
    """
    scale, alg = config.scale, config.algorithm
    if launched_world_size() > 1:
        why = _NOT_DATA_PARALLEL.get(alg.name)
        if alg.name == "grpo" and alg.std_scope == "batch":
            why = "std_scope 'batch' takes the std over the whole step's batch, which no rank holds"
        if why:
            raise ConfigError(
                f"algorithm.name {alg.name!r} is not supported under torchrun yet ({why}); "
                "train with one process"
            )
    if scale.num_generation_workers > 0:
        _check_generation_workers(config)
    if scale.num_env_workers == 0 and scale.num_generation_workers == 0:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        which = "num_env_workers" if scale.num_env_workers else "num_generation_workers"
        raise ConfigError(f"scale.{which} > 0 needs Ray: pip install 'agentic-rl[ray]'") from None
    target = _host_port(scale.ray_address) if scale.ray_address else None
    if target is not None:
        try:
            socket.create_connection(target, timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise ConfigError(
                f"scale.ray_address: no Ray cluster reachable at {scale.ray_address} "
                f"({exc.strerror or type(exc).__name__}); start one with 'ray start --head' "
                "or leave the address empty for a local Ray"
            ) from None


@dataclass
class ScaleOut:
    """Where this process's envs live and which rank it is (built by :func:`scale_out`).

    Attributes:
        ctx: this process's rank in the data-parallel job (W = 1 without torchrun).
        pool: the run's env workers, or None (envs in this process).
    """

    ctx: DistContext = field(default_factory=DistContext)
    pool: Any = None  # EnvWorkerPool | None (Ray is an optional extra)

    def make_env(self, env_id: str, **kwargs: Any) -> Env:
        """One env instance: a proxy into the next env worker, or ``agentic_rl.envs.make``."""
        if self.pool is None:
            return make(env_id, **kwargs)
        return self.pool.make(env_id, **kwargs)


def _start_ray(scale: Any) -> bool:
    """Start or join the run's Ray (unless this process is already connected); returns whether
    this call started it (and must stop it).

    Raises:
        ConfigError: the cluster cannot be joined, or has fewer CPUs than the env and
            generation workers reserve.
    """
    import ray

    wanted = (
        scale.num_env_workers * scale.env_worker_cpus
        + scale.num_generation_workers * scale.generation_worker_cpus
    )
    started = False
    if not ray.is_initialized():
        try:
            # empty address: a private local Ray on loopback with token authentication;
            # logical CPUs enough for every worker
            init_ray(scale.ray_address, num_cpus=max(os.cpu_count() or 1, math.ceil(wanted)))
        except (ConnectionError, RuntimeError, ValueError, AgenticRLError) as exc:
            raise ConfigError(
                f"scale.ray_address {scale.ray_address or '(local)'}: cannot start or join Ray: "
                f"{' '.join(str(exc).split())}"
            ) from None
        started = True
    available = ray.cluster_resources().get("CPU", 0.0)
    if wanted > available:
        if started:
            ray.shutdown()
        raise ConfigError(
            f"scale: {scale.num_env_workers} env workers x {scale.env_worker_cpus:g} CPUs + "
            f"{scale.num_generation_workers} generation workers x "
            f"{scale.generation_worker_cpus:g} CPUs = {wanted:g} CPUs, but the Ray cluster has "
            f"{available:g}; lower scale.env_worker_cpus / scale.generation_worker_cpus or add nodes"
        )
    return started


@contextmanager
def scale_out(config: Any) -> Iterator[ScaleOut]:
    """Join the torchrun process group (if launched so), start or join Ray (if env or generation
    workers are asked) and start the env workers; on exit, also after an error, shut down the
    env workers, the Ray this call started (and with it any generation worker still alive), and
    the process group this call joined.

    Raises:
        ConfigError: see :func:`_start_ray`.
        RuntimeError: a torchrun rendezvous that fails (see ``init_distributed``).
    """
    joined = launched_world_size() > 1 and not (dist.is_available() and dist.is_initialized())
    # NCCL when the policy trains on GPUs (each rank on its local GPU: `cuda`/`auto` pick it),
    # gloo on CPUs
    gpu = config.model.device != "cpu" and torch.cuda.is_available()
    ctx = init_distributed("nccl" if gpu else "gloo")
    pool, started_ray = None, False
    scale = config.scale
    try:
        if scale.num_env_workers > 0 or scale.num_generation_workers > 0:
            started_ray = _start_ray(scale)
        if scale.num_env_workers > 0:
            from agentic_rl.rollout.env_workers import EnvWorkerPool

            pool = EnvWorkerPool(
                scale.num_env_workers,
                cpus_per_worker=scale.env_worker_cpus,
                timeout_s=scale.env_worker_timeout_s,
            )
        yield ScaleOut(ctx, pool)
    finally:
        if pool is not None:
            pool.shutdown()
        if started_ray:
            import ray

            ray.shutdown()
        if joined and dist.is_initialized():
            dist.destroy_process_group()


class NullMetricsLog:
    """The metrics log of ranks > 0: writes nothing (rank 0 logs the step's all-rank metrics)."""

    def write(self, row: dict[str, Any]) -> None:
        """Discard ``row``."""

    def close(self) -> None:
        """Nothing to close."""
