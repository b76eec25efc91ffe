"""Scale-out of the training recipe: envs in Ray env workers, and data-parallel ranks under torchrun.

Two independent switches, both off by default (then the recipe runs exactly as on one process):

* **Env workers** (``[scale] num_env_workers = N``, ``agentic-rl train --num-env-workers N
  [--ray-address ADDR]``): every env instance of the run (warm-up demonstrations, RL rollouts,
  evaluations) is a :class:`~agentic_rl.rollout.env_workers.RemoteEnv` proxy into one
  :class:`~agentic_rl.rollout.env_workers.EnvWorkerPool` of N Ray actors, started once per run
  and shut down at its end, also when the run fails. ``ray_address`` joins a running cluster
  (``auto``, ``host:port``, ``ray://host:port``); empty starts a private local Ray for the run.
  Generation stays in the trainer process. With the continuous decode schedule (the default
  ``fast`` sampler) the rollout engine runs env steps on worker threads, so steps of different
  episodes are in flight together (one at a time per actor).
* **Data parallel** (``torchrun --nproc-per-node W -m agentic_rl.cli train …``): W ranks each
  roll out a contiguous share of each step's tasks (a group never spans ranks, so group
  baselines are exact), run the unchanged update on it, and average gradients weighted by each
  rank's loss normaliser before the optimizer step (:mod:`agentic_rl.trainer.distributed`), so
  every rank applies the update one process would. Warm-up batches and eval seeds are sharded
  the same way. Only rank 0 writes the run directory (config, metrics, trajectories of all
  ranks, gathered to it, checkpoints, evaluation, report); at the end the ranks compare SHA-256
  digests of their weights and the run fails if they differ.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from agentic_rl.envs import Env, make
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.distributed import DistContext, init_distributed

T = TypeVar("T")

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


def check_scale(config: Any) -> None:
    """Check ``[scale]`` and the launch before any work: Ray installed, cluster reachable,
    algorithm supported under ``torchrun``.

    Raises:
        ConfigError: Ray missing while ``num_env_workers`` > 0; ``ray_address`` malformed or
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
    if scale.num_env_workers == 0:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError(
            "scale.num_env_workers > 0 needs Ray: pip install 'agentic-rl[ray]'"
        ) from None
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


def _start_pool(scale: Any) -> tuple[Any, bool]:
    """The run's :class:`EnvWorkerPool`, and whether this call started Ray (and must stop it).

    Raises:
        ConfigError: the cluster cannot be joined, or has fewer CPUs than the workers reserve.
    """
    import ray

    from agentic_rl.rollout.env_workers import EnvWorkerPool

    wanted = scale.num_env_workers * scale.env_worker_cpus
    started = False
    if not ray.is_initialized():
        try:
            if scale.ray_address:
                ray.init(address=scale.ray_address, include_dashboard=False, log_to_driver=False)
            else:  # a private local Ray; logical CPUs enough for every worker
                ray.init(
                    address="local",
                    num_cpus=max(os.cpu_count() or 1, math.ceil(wanted)),
                    include_dashboard=False,
                    log_to_driver=False,
                )
        except (ConnectionError, RuntimeError, ValueError) as exc:
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
            f"scale: {scale.num_env_workers} env workers x {scale.env_worker_cpus:g} CPUs = {wanted:g} "
            f"CPUs, but the Ray cluster has {available:g}; lower scale.env_worker_cpus or add nodes"
        )
    pool = EnvWorkerPool(
        scale.num_env_workers,
        cpus_per_worker=scale.env_worker_cpus,
        timeout_s=scale.env_worker_timeout_s,
    )
    return pool, started


@contextmanager
def scale_out(config: Any) -> Iterator[ScaleOut]:
    """Join the torchrun process group (if launched so) and start the env workers (if asked);
    on exit, also after an error, shut down the workers, the Ray this call started, and the
    process group this call joined.

    Raises:
        ConfigError: see :func:`_start_pool`.
        RuntimeError: a torchrun rendezvous that fails (see ``init_distributed``).
    """
    joined = launched_world_size() > 1 and not (dist.is_available() and dist.is_initialized())
    # gloo: the recipe trains on the CPU (NCCL would need the model and gradients on GPUs)
    ctx = init_distributed("gloo")
    pool, started_ray = None, False
    try:
        if config.scale.num_env_workers > 0:
            pool, started_ray = _start_pool(config.scale)
        yield ScaleOut(ctx, pool)
    finally:
        if pool is not None:
            pool.shutdown()
        if started_ray:
            import ray

            ray.shutdown()
        if joined and dist.is_initialized():
            dist.destroy_process_group()


def gather_to_main(items: list[T], ctx: DistContext) -> list[T]:
    """Every rank's ``items`` concatenated in rank order on rank 0 (picklable objects); ``[]``
    on the other ranks. One process: ``items`` unchanged."""
    if not ctx.distributed:
        return list(items)
    parts: list[Any] | None = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(list(items), parts, dst=0)
    return [x for part in parts for x in part] if ctx.is_main else []


def all_gather_items(items: list[T], ctx: DistContext) -> list[T]:
    """Every rank's ``items`` concatenated in rank order, on every rank."""
    if not ctx.distributed:
        return list(items)
    parts: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(parts, list(items))
    return [x for part in parts for x in part]


def broadcast_from_main(obj: T, ctx: DistContext) -> T:
    """Rank 0's ``obj`` on every rank (picklable)."""
    if not ctx.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 (hex) over the names and raw bytes of ``model.state_dict()``: equal iff the weights are bitwise equal."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def replica_digests(model: torch.nn.Module, ctx: DistContext) -> list[str]:
    """Every rank's :func:`weights_digest`, in rank order, on every rank.

    Raises:
        RuntimeError: the ranks' weights differ (data-parallel replicas diverged).
    """
    digests = all_gather_items([weights_digest(model)], ctx)
    if len(set(digests)) > 1:
        raise RuntimeError(f"data-parallel ranks hold different weights: {digests}")
    return digests


class NullMetricsLog:
    """The metrics log of ranks > 0: writes nothing (rank 0 logs the step's all-rank metrics)."""

    def write(self, row: dict[str, Any]) -> None:
        """Discard ``row``."""

    def close(self) -> None:
        """Nothing to close."""
