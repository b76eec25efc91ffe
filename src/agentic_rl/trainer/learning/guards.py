"""Numerical guards of the training loop: stop at the first non-finite loss, gradient or weight.

A NaN or inf that reaches the weights silently ruins every later step and the final model.
:func:`check_finite` is called on each update's loss and gradient norm *before*
``optimizer.step()`` (``trainer.update``), so a bad step changes no weight, and
:func:`check_finite_weights` before every checkpoint is written (``trainer.checkpoint``: an
update that overflowed the weights; the recipe always checkpoints its last RL step before it
exports the final model). Both raise :class:`NonFiniteError`, which the CLI prints as one
``error:`` line (exit status 2); the run directory keeps its last good checkpoint and no
``final_model`` is written.

Cost: one scalar per update; the weight check is one fused norm over the trainable weights
per checkpoint (55 ms for 108 M float32 weights on one CPU thread).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from agentic_rl.errors import AgenticRLError

__all__ = ["NonFiniteError", "check_finite", "check_finite_weights"]

_HINT = (
    "training stopped before this step changed any weight, and no final model is written; lower the learning "
    "rate (optim.lr / warmup.lr) or set optim.max_grad_norm"
)


class NonFiniteError(AgenticRLError):
    """A loss, gradient norm or weight became NaN or ±inf during training."""


def check_finite(value: float | torch.Tensor, where: str) -> None:
    """Raise when ``value`` (a Python number or a one-element tensor) is NaN or ±inf.

    Args:
        value: e.g. the step's loss or the gradient norm returned by ``clip_grad_norm_``.
        where: what the value is, for the message (``"gradient norm of the RL update"``).

    Raises:
        NonFiniteError: ``value`` is not finite (the message names ``where`` and the value).
    """
    number = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
    if not math.isfinite(number):
        raise NonFiniteError(f"non-finite {where} ({number}): {_HINT}")


def check_finite_weights(params: Iterable[torch.Tensor], where: str) -> None:
    """Raise when any element of ``params`` is NaN or ±inf.

    One fused pass (``torch.nn.utils.get_total_norm``): the 2-norm of all elements is finite
    exactly when every element is (an overflow of the norm itself needs weights above ~1e19,
    which counts as diverged too).

    Raises:
        NonFiniteError: a weight is not finite (the message names ``where``).
    """
    tensors = [p.detach() for p in params]
    if not tensors:
        return
    norm = torch.nn.utils.get_total_norm(tensors)
    if not bool(torch.isfinite(norm)):
        bad = next(
            (
                f"parameter tensor #{i}"
                for i, t in enumerate(tensors)
                if not bool(torch.isfinite(t).all())
            ),
            "their norm overflows",
        )
        raise NonFiniteError(
            f"non-finite weights {where} ({bad}): training stopped, and neither this checkpoint "
            "nor a final model is written; lower the learning rate (optim.lr / warmup.lr)"
        )
