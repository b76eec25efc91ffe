"""Checkpoints: trainable weights, optimizer, RNG states and progress, for ``--resume``.

Layout of ``RUN_DIR/checkpoints/step-NNNNNN/``:

* ``trainable.safetensors``: every parameter with ``requires_grad`` (all weights for full
  fine-tuning, the adapters for LoRA); tied weights are stored once.
* ``trainer_state.pt``: optimizer state, Python/torch/sampler RNG states, the RL step reached
  and the evaluation rows logged so far.

A checkpoint is written to a temporary folder and renamed, so a process killed while saving
leaves the previous checkpoint intact; older checkpoints are then deleted. Weights that are not
finite are never saved (:class:`~agentic_rl.trainer.learning.guards.NonFiniteError`).

Loading is safe: ``trainer_state.pt`` is read with ``torch.load(weights_only=True)`` (tensors,
numbers, strings, lists, dicts: no arbitrary pickled objects run), and a truncated or corrupt
file raises :class:`~agentic_rl.errors.RunDirError` naming it instead of a library traceback.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from agentic_rl.errors import RunDirError
from agentic_rl.trainer.learning.guards import check_finite_weights


@dataclass(frozen=True)
class CheckpointProgress:
    """Progress saved with a checkpoint.

    Attributes:
        rl_step: RL steps completed (0 = right after the warm-up).
        evals: eval metric rows logged so far (kept for the summary).
        extra: free JSON-serialisable progress data (timings).
    """

    rl_step: int
    evals: list[dict[str, Any]]
    extra: dict[str, Any]


def _trainable(model) -> dict[str, torch.Tensor]:
    seen: set[int] = set()
    out = {}
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out[name] = p.detach().contiguous().cpu()
    return out


def save_checkpoint(
    run_dir: Path, model, optimizer, sampler: torch.Generator, state: CheckpointProgress
) -> Path:
    """Write a checkpoint for ``state.rl_step`` and delete older ones; returns its folder.

    Raises:
        NonFiniteError: a trainable weight is NaN or ±inf (nothing is written; the previous
            checkpoint stays the newest).
    """
    weights = _trainable(model)
    check_finite_weights(weights.values(), f"before the checkpoint of RL step {state.rl_step}")
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.rl_step:06d}"
    tmp = root / f".tmp-step-{state.rl_step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file(weights, str(tmp / "trainable.safetensors"))
    torch.save(
        {
            "rl_step": state.rl_step,
            "evals": state.evals,
            "extra": state.extra,
            "optimizer": optimizer.state_dict(),
            "python_rng": random.getstate(),
            "torch_rng": torch.get_rng_state(),
            "sampler_rng": sampler.get_state(),
        },
        tmp / "trainer_state.pt",
    )
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in root.glob("step-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path:
    """The newest complete checkpoint of a run.

    Raises:
        RunDirError: the run directory or its checkpoints are missing.
    """
    if not (run_dir / "config.toml").is_file():
        raise RunDirError(f"not a run directory (no config.toml): {run_dir}")
    found = sorted((run_dir / "checkpoints").glob("step-*"))
    found = [
        p
        for p in found
        if (p / "trainer_state.pt").is_file() and (p / "trainable.safetensors").is_file()
    ]
    if not found:
        raise RunDirError(f"no checkpoint to resume from in {run_dir / 'checkpoints'}")
    return found[-1]


def load_checkpoint(path: Path, model, optimizer, sampler: torch.Generator) -> CheckpointProgress:
    """Restore weights, optimizer and RNG states in place; returns the saved progress.

    Raises:
        RunDirError: the checkpoint does not match the model (different trainable parameters),
            or one of its files is truncated, corrupt or not what a checkpoint holds (the
            message names the file). Nothing is changed then.
    """
    weights = load_weights(path / "trainable.safetensors")
    expected = set(_trainable(model))
    if set(weights) != expected:
        raise RunDirError(
            f"checkpoint {path} does not match the model (LoRA setting or model changed?)"
        )
    blob = load_trainer_state(path / "trainer_state.pt")
    model.load_state_dict(weights, strict=False)
    try:
        optimizer.load_state_dict(blob["optimizer"])
        random.setstate(blob["python_rng"])
        torch.set_rng_state(blob["torch_rng"])
        sampler.set_state(blob["sampler_rng"])
    except (TypeError, ValueError, RuntimeError) as exc:
        raise RunDirError(
            f"{path / 'trainer_state.pt'}: optimizer or RNG state does not fit this run: {exc}"
        ) from None
    return CheckpointProgress(blob["rl_step"], blob["evals"], blob["extra"])


_STATE_KEYS = ("rl_step", "evals", "extra", "optimizer", "python_rng", "torch_rng", "sampler_rng")


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file (on the CPU).

    Raises:
        RunDirError: the file is missing, truncated or not a safetensors file (names the file).
    """
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise RunDirError(f"checkpoint file missing: {path}") from None
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own SafetensorError, OSError, ...
        raise RunDirError(
            f"corrupt checkpoint file {path} (truncated or overwritten?): "
            f"{type(exc).__name__}: {exc}"
        ) from None


def load_trainer_state(path: Path) -> dict[str, Any]:
    """The ``trainer_state.pt`` dict, loaded with ``torch.load(weights_only=True)``.

    Raises:
        RunDirError: the file is missing, truncated, holds objects a weights-only load refuses,
            or lacks a key (names the file).
    """
    try:
        blob = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise RunDirError(f"checkpoint file missing: {path}") from None
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError, ...
        detail = " ".join(str(exc).split())[:200]
        raise RunDirError(
            f"corrupt or unsafe checkpoint file {path} (truncated, overwritten, or not a "
            f"weights-only checkpoint): {type(exc).__name__}: {detail}"
        ) from None
    missing = [k for k in _STATE_KEYS if not isinstance(blob, dict) or k not in blob]
    if missing:
        raise RunDirError(
            f"checkpoint file {path} lacks {', '.join(missing)} (not a trainer_state.pt)"
        )
    return blob
