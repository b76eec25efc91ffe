"""Keys that moved to another section, and reading old run directories' configs.

``[algorithm]`` once held every RL setting; they are now split by concern (``[sampling]``,
``[loss]``, ``[optim]``, ``[ppo]``). A user's config or ``--set`` with an old key fails with
one line naming the new key; a saved ``RUN_DIR/config.toml`` written before the split is
migrated (:func:`migrate_keys`) so ``--resume``, ``agentic-rl eval --model RUN_DIR`` and the
reports still read old runs.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["MOVED_KEYS", "migrate_keys", "moved_keys"]

_MOVES = {
    "sampling": ("task_sampling", "dynamic_sampling", "rollout_tasks", "max_sample_rounds"),
    "loss": (
        "clip_eps_low",
        "clip_eps_high",
        "dual_clip",
        "kl_coef",
        "kl_estimator",
        "kl_mode",
        "loss_agg",
        "loss_norm_constant",
    ),
    "optim": (
        "lr",
        "weight_decay",
        "max_grad_norm",
        "micro_batch_size",
        "micro_batch_tokens",
        "ppo_epochs",
        "minibatches",
        "skip_zero_advantage",
    ),
    "ppo": ("value_lr", "value_clip"),
}

#: old dotted key -> new dotted key
MOVED_KEYS: dict[str, str] = {
    f"algorithm.{key}": f"{section}.{key}" for section, keys in _MOVES.items() for key in keys
}


def moved_keys(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``(old, new)`` dotted keys of ``data`` (a parsed config) that moved, in file order."""
    section = data.get("algorithm")
    if not isinstance(section, dict):
        return []
    return [
        (f"algorithm.{k}", MOVED_KEYS[f"algorithm.{k}"])
        for k in section
        if f"algorithm.{k}" in MOVED_KEYS
    ]


def migrate_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with every moved key at its new place (a key already set at its new
    place wins over the old one)."""
    out = copy.deepcopy(data)
    for old, new in moved_keys(data):
        old_section, key = old.split(".")
        new_section = new.split(".")[0]
        value = out[old_section].pop(key)
        target = out.setdefault(new_section, {})
        if isinstance(target, dict):
            target.setdefault(key, value)
    return out
