"""The data-parallel ranks of a run as one object whose collectives do nothing on one process.

The recipe reads the same on one process and under ``torchrun`` with W processes: it shards the
step's tasks with :meth:`Ranks.shard`, trains through :meth:`Ranks.update`, collects what rank 0
logs with :meth:`Ranks.gather_to_main` and takes rank 0's decisions with
:meth:`Ranks.broadcast_from_main`. With W = 1 every method is the identity (or a plain call);
with W > 1 they issue the ``torch.distributed`` collectives of
:mod:`agentic_rl.trainer.parallel.distributed` and :mod:`agentic_rl.trainer.parallel.scale_out`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from agentic_rl.trainer.parallel import distributed
from agentic_rl.trainer.parallel import scale_out as scale

T = TypeVar("T")

__all__ = ["Ranks"]


@dataclass(frozen=True)
class Ranks:
    """This process's place among the run's W data-parallel ranks, with its collectives.

    Attributes:
        ctx: the rank, world size and device (:class:`~agentic_rl.trainer.parallel.distributed.DistContext`;
            W = 1 without torchrun).
    """

    ctx: distributed.DistContext = field(default_factory=distributed.DistContext)

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the rank that logs, stores and checkpoints)."""
        return self.ctx.is_main

    @property
    def rank(self) -> int:
        """r in 0..W-1."""
        return self.ctx.rank

    @property
    def world_size(self) -> int:
        """W, the number of processes."""
        return self.ctx.world_size

    @property
    def distributed(self) -> bool:
        """True when W > 1 (collectives are issued)."""
        return self.ctx.distributed

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's contiguous share of ``items`` (all of them on one process)."""
        return distributed.shard(items, self.ctx)

    def gather_to_main(self, items: list[T]) -> list[T]:
        """Every rank's ``items`` in rank order on rank 0, ``[]`` elsewhere (``items`` on one process)."""
        return distributed.gather_to_main(items, self.ctx)

    def all_gather(self, items: list[T]) -> list[T]:
        """Every rank's ``items`` in rank order, on every rank (``items`` on one process)."""
        return distributed.all_gather_items(items, self.ctx)

    def broadcast_from_main(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank (``obj`` on one process)."""
        return distributed.broadcast_from_main(obj, self.ctx)

    def sum(self, values: Sequence[float]) -> list[float]:
        """Each of a few floats summed over ranks (float64; unchanged on one process)."""
        return distributed.all_reduce_sum(values, self.ctx)

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers on every rank (nothing on one process)."""
        distributed.broadcast_parameters(model, self.ctx)

    def update(
        self, update: Callable[..., T], model, optimizer, trajectories, *args, **kwargs
    ) -> T:
        """``update(model, optimizer, trajectories, ...)`` on this rank's trajectories; under
        torchrun inside :func:`~agentic_rl.trainer.parallel.distributed.data_parallel_update` (gradients
        all-reduced, metrics averaged over ranks), on one process a plain call."""
        if not self.distributed:
            return update(model, optimizer, trajectories, *args, **kwargs)
        return distributed.data_parallel_update(
            update, model, optimizer, trajectories, *args, **kwargs
        )

    def minibatches(
        self, split: Callable[[int], list[list[int]]], keep: list[int], parts: int
    ) -> list[list[int]]:
        """``split(parts)`` (the kept rows cut into minibatches); under torchrun one minibatch,
        ``[keep]``, even when empty: every rank must run the same number of optimizer steps, and
        a rank with nothing to train still joins each one."""
        return [keep] if self.distributed else split(parts)

    def replica_digests(self, model: torch.nn.Module) -> list[str]:
        """Every rank's weights digest (checks the replicas agree); ``[]`` on one process.

        Raises:
            RuntimeError: the ranks' weights differ.
        """
        return distributed.replica_digests(model, self.ctx) if self.distributed else []

    def metrics_log(self, make: Callable[[], Any]) -> Any:
        """``make()`` (the run's metrics log) on rank 0; a log that writes nothing elsewhere."""
        return make() if self.is_main else scale.NullMetricsLog()
