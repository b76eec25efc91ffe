"""Where the policy lives and in which precision it trains: one resolved :class:`Placement`.

``[model] device`` and ``[model] precision`` (:class:`~agentic_rl.config.ModelConfig`) are
resolved once, when a run starts, into a :class:`Placement` that every stage reads: the model
loader (device, parameter dtype), the update (the autocast context of its forward passes), the
sampler (the dtype of its weight copy and KV cache), checkpoints (loaded onto this device),
the run's first log line and ``summary.json`` (:meth:`Placement.describe`).

Precisions (the names of PyTorch Lightning's ``precision`` flag, which users know):

* ``fp32``: float32 weights, optimizer state and maths. The CPU default: on CPUs without
  native bf16 matmuls, bf16 is slower, and the demo's figures are fp32 figures.
* ``bf16-mixed``: float32 master weights and AdamW state; forward and backward matmuls run
  in bf16 under ``torch.autocast`` (Micikevicius et al. 2018, "Mixed precision training",
  arXiv:1710.03740, with bf16 instead of fp16, so no loss scaling is needed). The CUDA
  default. Softmax, log-softmax and norms stay float32 (autocast's float32 op list), and
  every logprob the loss reads is float32.
* ``bf16``: bf16 weights and optimizer state (half the memory of bf16-mixed's master
  weights; updates smaller than a weight's bf16 resolution are lost).

``auto`` precision is ``bf16-mixed`` on CUDA and ``fp32`` on the CPU; ``auto`` device is CUDA
when ``torch.cuda.is_available()`` (GPU 0, or the current device), else the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from agentic_rl.errors import ConfigError

__all__ = ["PRECISIONS", "Placement", "device_name", "placement_of", "resolve_placement"]

#: precision names of ``[model] precision`` besides ``auto``
PRECISIONS = ("fp32", "bf16-mixed", "bf16")


@dataclass(frozen=True)
class Placement:
    """The resolved device and precision of a run's policy.

    Attributes:
        device: the torch device of the model, its optimizer state, the critic, the reference
            model and every tensor the update creates.
        precision: ``fp32``, ``bf16-mixed`` or ``bf16`` (module docstring).
        sampler_dtype: dtype of the fast sampler's weight copy and KV cache.
        cuda_graphs: whether the fast sampler captures its decode step as CUDA graphs (only
            ever True on a CUDA device).
    """

    device: torch.device
    precision: str = "fp32"
    sampler_dtype: torch.dtype = torch.float32
    cuda_graphs: bool = False

    @property
    def param_dtype(self) -> torch.dtype:
        """dtype of the trainable weights and of the optimizer state."""
        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """dtype of autocast regions (``bf16-mixed``), or None (no autocast)."""
        return torch.bfloat16 if self.precision == "bf16-mixed" else None

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context the update's forward passes run in: bf16 autocast on this device for
        ``bf16-mixed``, else a no-op. Backward passes run outside it (PyTorch's advice)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def describe(self) -> dict[str, str]:
        """``{"device", "device_name", "precision", "sampler_dtype"}`` for logs and ``summary.json``
        (``device_name``: the GPU's name, or the CPU's model name as Linux reports it)."""
        return {
            "device": str(self.device),
            "device_name": device_name(self.device),
            "precision": self.precision,
            "sampler_dtype": str(self.sampler_dtype).removeprefix("torch."),
        }

    def summary_line(self) -> str:
        """One line for the run's first log line, e.g. ``cuda:0 (NVIDIA H200), bf16-mixed``."""
        d = self.describe()
        return f"{d['device']} ({d['device_name']}), {d['precision']}"


def device_name(device: torch.device) -> str:
    """The GPU's name for a CUDA device; for the CPU, its model name from ``/proc/cpuinfo``
    (or ``"cpu"`` where that file does not say)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in _cpuinfo_lines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "cpu"


def _cpuinfo_lines() -> Iterator[str]:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        yield from f


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    device = torch.device(name)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        build = torch.__version__
        hint = " (a CPU-only torch build)" if torch.version.cuda is None else ""
        raise ConfigError(
            f"model.device = {name!r}, but CUDA is not available to torch {build}{hint}; "
            "use model.device = 'auto' or 'cpu'"
        )
    count = torch.cuda.device_count()
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= count:
        raise ConfigError(
            f"model.device = {name!r}, but this machine has {count} CUDA device(s) "
            f"(cuda:0 .. cuda:{count - 1})"
        )
    return torch.device("cuda", index)


def resolve_placement(
    device: str = "auto",
    precision: str = "auto",
    sampler_dtype: str = "auto",
    *,
    fast_sampler: bool = True,
    cuda_graphs: bool = True,
) -> Placement:
    """Resolve ``[model]``'s device, precision and sampler dtype on this machine.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        precision: ``auto`` or one of :data:`PRECISIONS`.
        sampler_dtype: ``auto``, ``float32`` or ``bfloat16``. ``auto`` is bfloat16 when the
            precision is a bf16 one and the sampler is the fast one (it samples from its own
            weight copy), else the weights' dtype.
        fast_sampler: ``[model] sampler == "fast"``.
        cuda_graphs: ``[model] cuda_graphs`` (kept only on CUDA with the fast sampler).

    Raises:
        ConfigError: a CUDA device that this machine or this torch build does not have; an
            unknown precision or sampler dtype.
    """
    dev = _resolve_device(device)
    if precision == "auto":
        precision = "bf16-mixed" if dev.type == "cuda" else "fp32"
    if precision not in PRECISIONS:
        raise ConfigError(f"model.precision must be auto or one of {PRECISIONS}, got {precision!r}")
    if sampler_dtype == "auto":
        bf16 = precision != "fp32" and (fast_sampler or precision == "bf16")
        dtype = torch.bfloat16 if bf16 else torch.float32
    elif sampler_dtype in ("float32", "bfloat16"):
        dtype = getattr(torch, sampler_dtype)
    else:
        raise ConfigError(
            f"model.sampler_dtype must be auto, float32 or bfloat16, got {sampler_dtype!r}"
        )
    if not fast_sampler and precision == "bf16":
        dtype = torch.bfloat16  # the HF sampler reads the bf16 weights themselves
    return Placement(dev, precision, dtype, cuda_graphs and fast_sampler and dev.type == "cuda")


def placement_of(model_config) -> Placement:
    """:func:`resolve_placement` of a ``[model]`` section (:class:`~agentic_rl.config.ModelConfig`).

    Raises:
        ConfigError: as :func:`resolve_placement`.
    """
    return resolve_placement(
        model_config.device,
        model_config.precision,
        model_config.sampler_dtype,
        fast_sampler=model_config.sampler == "fast",
        cuda_graphs=model_config.cuda_graphs,
    )
