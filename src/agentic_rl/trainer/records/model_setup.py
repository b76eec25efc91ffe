"""The trainable model of a run, built in one place: base weights, LoRA, gradient checkpointing.

:func:`with_lora` is the only place LoRA adapters are attached (the recipe's set-up and loading a
checkpoint of a LoRA run both call it), so a checkpoint's trainable parameters always have the
names the run trained. :func:`trainable_model` loads the base model of ``[model]`` and applies
the configured options; :func:`model_from_checkpoint` rebuilds a run checkpoint's model (the
run's base model with the checkpoint's trainable weights).
"""

from __future__ import annotations

from pathlib import Path

import torch

from agentic_rl.config import ModelConfig
from agentic_rl.errors import ModelNotFoundError
from agentic_rl.policy.device import Placement
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir

__all__ = ["model_from_checkpoint", "trainable_model", "with_lora"]


def with_lora(model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    """``model`` with LoRA adapters (Hu et al. 2021, arXiv:2106.09685) on every linear layer when
    ``cfg.lora`` (rank ``lora_rank``, α ``lora_alpha``, dropout ``lora_dropout``; peft), else
    ``model`` unchanged."""
    if not cfg.lora:
        return model
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def trainable_model(
    model_dir: Path, cfg: ModelConfig, placement: Placement | None = None
) -> torch.nn.Module:
    """The base model at ``model_dir`` on ``placement``'s device in its parameter dtype
    (float32 for ``fp32`` and ``bf16-mixed``, bf16 for ``bf16``; default: the CPU, float32)
    with the ``[model]`` options: LoRA (:func:`with_lora`) and gradient checkpointing.

    Raises:
        ModelNotFoundError: nothing loadable at ``model_dir``.
    """
    placement = placement or Placement(torch.device("cpu"))
    base = load_model(model_dir, device=placement.device, dtype=placement.param_dtype)
    model = with_lora(base, cfg)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model


def model_from_checkpoint(path: Path, cfg: ModelConfig, device="cpu"):
    """``(model, tokenizer)`` of a run checkpoint folder (``RUN_DIR/checkpoints/step-N``): the run's
    base model (``cfg.path``; LoRA re-attached) with the checkpoint's trainable weights, in eval mode.

    Raises:
        ModelNotFoundError: the base model is missing, or the checkpoint does not fit it.
        RunDirError: the weights file is truncated or corrupt (names it).
    """
    from agentic_rl.trainer.records.checkpoint import load_weights

    base = resolve_model_dir(cfg.path)
    model = with_lora(load_model(base, device=device), cfg)
    weights = {k: v.to(device) for k, v in load_weights(path / "trainable.safetensors").items()}
    result = model.load_state_dict(weights, strict=False)
    if result.unexpected_keys:
        raise ModelNotFoundError(
            f"checkpoint {path} does not fit the run's model: "
            f"unexpected {result.unexpected_keys[:3]}"
        )
    return model.eval(), load_tokenizer(base)
