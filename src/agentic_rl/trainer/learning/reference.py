"""The KL reference policy: the weights at the start of RL, saved once and frozen."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

__all__ = ["REFERENCE_FILE", "save_reference", "reference_model"]

#: where a run keeps its reference weights, under its ``checkpoints/`` folder
REFERENCE_FILE = "reference.pt"


def save_reference(model: torch.nn.Module, path: Path) -> None:
    """Save ``model``'s current weights (its state dict) to ``path``."""
    torch.save(model.state_dict(), path)


def reference_model(model: torch.nn.Module, path: Path | None = None) -> torch.nn.Module:
    """A frozen copy of ``model`` in eval mode on ``model``'s device, with the weights saved at
    ``path`` if that file exists (a resumed run, possibly saved on another device), else
    ``model``'s current ones."""
    ref = copy.deepcopy(model).eval()
    if path is not None and path.exists():
        device = next(model.parameters()).device
        ref.load_state_dict(torch.load(path, weights_only=True, map_location=device))
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
