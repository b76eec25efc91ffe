"""Data-parallel training with torch distributed (launched by ``torchrun``; gloo on CPU, NCCL on GPU).

Each of the W processes (ranks) rolls out and scores its own share of the step's *groups*
(a group's G rollouts stay on one rank, so group baselines such as GRPO's are computed exactly
as on one process), runs the unchanged single-process update
(:func:`~agentic_rl.trainer.learning.update.policy_gradient_update` or ``sft_update``) on it, and then,
before the optimizer step, the gradients are all-reduced so every rank applies the same update.

Weighted mean across ranks. The single-process update normalises the loss of a step by a
count of the step: with ``loss_agg="token-mean"`` (DAPO, Yu et al. 2025, arXiv:2503.14476) the
number of trained tokens; with ``seq-mean-token-mean`` (GRPO) or ``seq-mean-token-sum``
(Dr. GRPO) the number of trajectories (see ``algorithms.losses.token_loss_weights``). On rank r
it divides by the rank's own count n_r, so its gradient is g_r = Σ_{items of r} ∇ℓ / n_r. The
all-reduce computes::

    g = Σ_r (n_r / N) · g_r = Σ_{all items} ∇ℓ / N,      N = Σ_r n_r

which is exactly the gradient of one process that accumulates the whole batch (plain DDP's
unweighted mean (1/W) Σ_r g_r equals it only when every rank has the same n_r). Gradient
clipping then uses the norm of the synchronised gradient, as one process would.

Why not ``DistributedDataParallel``'s module wrapper: DDP arms its gradient reducer inside
``DDP.forward``; the trainer's scoring calls the decoder and the LM head directly
(:mod:`agentic_rl.trainer.learning.scoring`, to apply the head only at trained positions), which would
bypass it, and a wrapped module hides ``get_decoder``. So the all-reduce is issued explicitly
with ``torch.distributed.all_reduce`` once per optimizer step (DDP without bucketing overlap);
initial weights are broadcast from rank 0, as DDP does at construction.

Launch (each rank runs the same script; torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, …)::

    torchrun --nproc-per-node 2 my_train_script.py

and in the script: ``ctx = init_distributed()``, ``broadcast_parameters(model)``,
``optimizer = DataParallelOptimizer(torch.optim.AdamW(...), ctx, max_grad_norm=1.0)``, take
this rank's groups with :func:`shard`, call
``data_parallel_update(policy_gradient_update, model, optimizer, trajectories, advantages, settings)``.
``agentic-rl train`` does all of this when launched by torchrun (:mod:`agentic_rl.trainer.parallel.scale_out`);
``docs/scale_out.md`` says what was tested here and what was not.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the data-parallel job.

    Attributes:
        rank: 0..world_size-1 (0 = the process that writes logs and checkpoints).
        world_size: W, the number of processes.
        local_rank: index on this machine (picks the GPU).
        device: the device this rank trains on.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """True on rank 0."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when more than one process takes part (collectives are issued)."""
        return self.world_size > 1


def init_distributed(backend: str | None = None) -> DistContext:
    """Join the process group that ``torchrun`` describes in the environment.

    Without ``WORLD_SIZE`` in the environment (a plain ``python`` launch) it returns a
    single-process context and initialises nothing.

    Args:
        backend: ``gloo`` (CPU) or ``nccl`` (GPU); None picks NCCL when CUDA is available.

    Raises:
        RuntimeError: ``WORLD_SIZE`` > 1 but ``RANK`` or ``MASTER_ADDR`` is missing (not
            launched by torchrun), or the rendezvous fails.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={world} but {', '.join(missing)} unset: launch with torchrun"
        )
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and backend != "gloo"
    backend = backend or ("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistContext(rank, world, local_rank, device)


def shard(items: Sequence[T], ctx: DistContext) -> list[T]:
    """This rank's contiguous share of ``items`` (e.g. the step's task seeds).

    Shard *tasks* (groups), not trajectories, so each group's baseline is computed on one rank.
    Shares differ by at most one item; a rank may get none (it then syncs zero gradients).
    """
    n, w = len(items), ctx.world_size
    start = ctx.rank * n // w
    return list(items[start : (ctx.rank + 1) * n // w])


def broadcast_parameters(model: torch.nn.Module, ctx: DistContext) -> None:
    """Copy rank 0's parameters and buffers to every rank (what DDP does at construction)."""
    if not ctx.distributed:
        return
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


class DataParallelOptimizer:
    """An optimizer whose ``step`` first averages gradients across ranks, token-weighted.

    Call :meth:`set_local_tokens` with this rank's normaliser count n_r (trained tokens, or
    trajectories for the sequence-mean losses) before the step (``data_parallel_update`` does
    it). ``step`` then sets every gradient to Σ_r (n_r / N) g_r (module docstring), clips it to
    ``max_grad_norm`` by its global L2 norm, and steps the wrapped optimizer. Parameters
    without a gradient on a rank count as zero.

    Args:
        optimizer: the wrapped optimizer (e.g. AdamW), identical on every rank.
        ctx: from :func:`init_distributed`.
        max_grad_norm: clip threshold on the synchronised gradient (0 = off).

    Attributes:
        last_grad_norm: global L2 norm of the synchronised gradient before clipping.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, ctx: DistContext, max_grad_norm: float = 1.0
    ):
        self.optimizer = optimizer
        self.ctx = ctx
        self.max_grad_norm = max_grad_norm
        self.local_tokens = 0
        self.last_grad_norm = 0.0

    @property
    def param_groups(self):
        """The wrapped optimizer's parameter groups."""
        return self.optimizer.param_groups

    def set_local_tokens(self, n: int) -> None:
        """Record n_r, this rank's trained tokens in the coming step (>= 0)."""
        if n < 0:
            raise ValueError(f"local token count must be >= 0, got {n}")
        self.local_tokens = int(n)

    def _params(self) -> list[torch.Tensor]:
        return [
            p for group in self.optimizer.param_groups for p in group["params"] if p.requires_grad
        ]

    def synchronize(self) -> float:
        """All-reduce the token-weighted gradients; returns N, the global token count."""
        params = self._params()
        total = float(all_reduce_sum([float(self.local_tokens)], self.ctx)[0])
        weight = self.local_tokens / total if total > 0 else 0.0
        if not self.ctx.distributed:
            weight = 1.0
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params]) * weight
        if self.ctx.distributed:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return total

    def step(self) -> None:
        """Synchronise, clip by the global norm, and step the wrapped optimizer."""
        self.synchronize()
        params = self._params()
        limit = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")
        self.last_grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
        self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of the wrapped optimizer."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state (checkpoints stay single-process compatible)."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load the wrapped optimizer's state."""
        self.optimizer.load_state_dict(state)


def all_reduce_sum(values: Sequence[float], ctx: DistContext) -> list[float]:
    """Sum a few floats over ranks (float64); returns them unchanged on one process."""
    t = torch.tensor(list(values), dtype=torch.float64)
    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def trained_tokens(trajectories: Sequence[Any]) -> int:
    """Trained (loss-mask 1, excluding position 0) tokens of ``trajectories``, as the update counts them."""
    return sum(sum(t.loss_mask[1:]) for t in trajectories)


def normalizer_count(trajectories: Sequence[Any], loss_agg: str = "token-mean") -> int:
    """n_r, the count the update normalises by: trained tokens (``token-mean``) or trajectories
    (``seq-mean-token-mean``, ``seq-mean-token-sum``).

    Raises:
        ValueError: unknown ``loss_agg``.
    """
    if loss_agg == "token-mean":
        return trained_tokens(trajectories)
    if loss_agg in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return len(trajectories)
    raise ValueError(f"unknown loss aggregation {loss_agg!r}")


def data_parallel_update(
    update: Callable[..., Any],
    model: torch.nn.Module,
    optimizer: DataParallelOptimizer,
    trajectories: Sequence[Any],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Run a single-process update on this rank's trajectories, with the cross-rank sync in its step.

    ``update`` is :func:`~agentic_rl.trainer.learning.update.policy_gradient_update` (its
    :class:`~agentic_rl.trainer.learning.update.LossSettings` among ``args``/``kwargs``) or
    ``sft_update`` (keyword ``max_grad_norm``, ``loss_agg`` token-mean); it runs with
    ``max_grad_norm = 0`` because clipping happens in the wrapped optimizer, on the
    synchronised gradient. A rank with no trained tokens skips the local update but still joins
    the all-reduce (with weight 0), so no rank waits forever.

    Returns:
        what ``update`` returns (a metrics dict, or an ``UpdateResult`` whose ``metrics`` are
        replaced; a rank that trained nothing gets ``UpdateResult.untrained``), with the metrics
        averaged over ranks: ``train/loss`` weighted by n_r, per-token metrics by trained
        tokens; ``train/tokens`` is the global token count and ``train/grad_norm`` the global
        norm before clipping.

    Raises:
        ValueError: no rank has a trained token (same as the single-process update).
    """
    from agentic_rl.trainer.learning.update import LossSettings, UpdateResult

    kwargs.pop("max_grad_norm", None)
    settings = next((a for a in [*args, *kwargs.values()] if isinstance(a, LossSettings)), None)
    if settings is not None:  # clipping happens in the wrapped optimizer
        args = tuple(replace(a, max_grad_norm=0.0) if a is settings else a for a in args)
        kwargs = {
            k: replace(v, max_grad_norm=0.0) if v is settings else v for k, v in kwargs.items()
        }
    else:
        kwargs["max_grad_norm"] = 0.0
    tokens = trained_tokens(trajectories)
    loss_agg = settings.loss_agg if settings is not None else kwargs.get("loss_agg", "token-mean")
    count = normalizer_count(trajectories, loss_agg)
    optimizer.set_local_tokens(count)
    result: Any = None
    if tokens > 0:
        result = update(model, optimizer, trajectories, *args, **kwargs)
    else:
        optimizer.step()  # zero gradient, but counted in N and part of the collective
        optimizer.zero_grad()
        result = UpdateResult.untrained(trajectories) if settings is not None else {}
    metrics = result.metrics if isinstance(result, UpdateResult) else result
    out = _rank_mean(metrics, count, tokens, optimizer)
    return replace(result, metrics=out) if isinstance(result, UpdateResult) else out


def _rank_mean(
    metrics: dict[str, float], count: int, tokens: int, optimizer: DataParallelOptimizer
) -> dict[str, float]:
    """``metrics`` averaged over ranks: ``train/loss`` weighted by the normaliser count n_r,
    the others by trained tokens; ``train/tokens`` summed, ``train/grad_norm`` the global norm.

    Raises:
        ValueError: no rank has a trained token.
    """
    keys = _agree_on_keys(
        sorted(k for k in metrics if k not in ("train/tokens", "train/grad_norm")), optimizer.ctx
    )
    weight = {k: (count if k == "train/loss" else tokens) for k in keys}
    sums = all_reduce_sum(
        [metrics.get(k, 0.0) * weight[k] for k in keys] + [float(count), float(tokens)],
        optimizer.ctx,
    )
    total_count, total_tokens = sums[-2], sums[-1]
    if total_tokens == 0:
        raise ValueError("data_parallel_update: no trained tokens on any rank")
    out = {
        k: s / (total_count if k == "train/loss" else total_tokens) for k, s in zip(keys, sums[:-2])
    }
    out.update({"train/tokens": total_tokens, "train/grad_norm": optimizer.last_grad_norm})
    return out


def _agree_on_keys(keys: list[str], ctx: DistContext) -> list[str]:
    if not ctx.distributed:
        return keys
    gathered: list[list[str] | None] = [None] * ctx.world_size
    dist.all_gather_object(gathered, keys)
    return sorted({k for ks in gathered for k in (ks or [])})


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
