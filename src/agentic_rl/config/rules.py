"""Range and choice rules of config fields, declared beside each field and checked in
``__post_init__``.

A field declares its rule where it is defined::

    lr: float = positive(3e-5)          # > 0
    kl_coef: float = non_negative(0.0)  # >= 0
    kl_mode: str = one_of("loss", "loss", "reward")
    lam: float = unit_interval(0.95)    # in [0, 1]

and the dataclass's ``__post_init__`` calls :func:`check_rules`, which raises ``ValueError``
naming the key (``key 'optim.lr' must be > 0, got 0``). The loader turns that into one
:class:`~agentic_rl.errors.ConfigError` line with the file.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["check_rules", "non_negative", "one_of", "positive", "unit_interval"]


def positive(default: Any) -> Any:
    """A field whose value must be > 0."""
    return dataclasses.field(default=default, metadata={"rule": "positive"})


def non_negative(default: Any) -> Any:
    """A field whose value must be >= 0 (0 usually means off)."""
    return dataclasses.field(default=default, metadata={"rule": "non_negative"})


def unit_interval(default: float) -> Any:
    """A field whose value must lie in [0, 1]."""
    return dataclasses.field(default=default, metadata={"rule": "unit_interval"})


def one_of(default: str, *choices: str) -> Any:
    """A string field whose value must be one of ``choices``."""
    return dataclasses.field(default=default, metadata={"choices": choices})


def check_rules(obj: Any, section: str) -> None:
    """Check every field rule of the dataclass instance ``obj`` (keys named ``section.field``;
    ``section`` empty for top-level keys).

    Raises:
        ValueError: a value breaks its field's rule (the message names the key).
    """
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{section}.{f.name}" if section else f.name
        rule = f.metadata.get("rule")
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ValueError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
        if rule == "positive" and not value > 0:
            raise ValueError(f"key '{key}' must be > 0, got {value!r}")
        if rule == "non_negative" and value < 0:
            raise ValueError(f"key '{key}' must be >= 0, got {value!r}")
        if rule == "unit_interval" and not 0.0 <= value <= 1.0:
            raise ValueError(f"{key} must be in [0, 1], got {value}")
