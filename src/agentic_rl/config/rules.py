"""Range and choice rules of config fields, declared beside each field and checked in
``__post_init__``.

A field declares its rule where it is defined::

    lr: float = positive(3e-5)          # > 0
    group_size: int = positive(8, MAX_GROUP_SIZE)  # > 0 and <= 1024 (config.bounds)
    kl_coef: float = non_negative(0.0)  # >= 0
    kl_mode: str = one_of("loss", "loss", "reward")
    lam: float = unit_interval(0.95)    # in [0, 1]

and the dataclass's ``__post_init__`` calls :func:`check_rules`, which raises ``ValueError``
naming the key (``key 'optim.lr' must be > 0, got 0``). The loader turns that into one
:class:`~agentic_rl.errors.ConfigError` line with the file.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from agentic_rl.config.bounds import Bounds, check_name, check_path, check_text

__all__ = [
    "check_device_name",
    "check_rules",
    "non_negative",
    "one_of",
    "positive",
    "text",
    "unit_interval",
]

#: torch device names a ``[model] device`` may take (``cuda:N``: GPU number N)
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d{1,3})?)$")


def positive(default: Any, at_most: float | None = None) -> Any:
    """A field whose value must be > 0 (and <= ``at_most`` when given: counts, sizes and
    durations have one, :mod:`agentic_rl.config.bounds`)."""
    return dataclasses.field(default=default, metadata={"bounds": Bounds(0, at_most, True)})


def non_negative(default: Any, at_most: float | None = None) -> Any:
    """A field whose value must be >= 0 (0 usually means off), and <= ``at_most`` when given."""
    return dataclasses.field(default=default, metadata={"bounds": Bounds(0, at_most)})


def unit_interval(default: float, *, below_one: bool = False) -> Any:
    """A field whose value must lie in [0, 1] (in [0, 1) with ``below_one``)."""
    return dataclasses.field(
        default=default, metadata={"bounds": Bounds(0.0, 1.0, high_open=below_one)}
    )


def one_of(default: str, *choices: str) -> Any:
    """A string field whose value must be one of ``choices``."""
    return dataclasses.field(default=default, metadata={"choices": choices})


def text(default: str, kind: str) -> Any:
    """A string field with a shape: ``"name"`` (one plain directory name,
    :func:`~agentic_rl.config.bounds.check_name`) or ``"path"`` (a non-empty path,
    :func:`~agentic_rl.config.bounds.check_path`)."""
    if kind not in _TEXT_RULES:
        raise ValueError(f"unknown text kind {kind!r}")
    return dataclasses.field(default=default, metadata={"text": kind})


_TEXT_RULES = {"name": check_name, "path": check_path}


def check_rules(obj: Any, section: str) -> None:
    """Check every field rule of the dataclass instance ``obj`` (keys named ``section.field``;
    ``section`` empty for top-level keys): its range, choices, text shape, and for every string
    field the absence of control characters (:func:`~agentic_rl.config.bounds.check_text`).

    Raises:
        ValueError: a value breaks its field's rule (the message names the key).
    """
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{section}.{f.name}" if section else f.name
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ValueError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
        bounds = f.metadata.get("bounds")
        if bounds is not None:
            bounds.check(key, value)
        if isinstance(value, str):
            _TEXT_RULES.get(f.metadata.get("text", ""), check_text)(key, value)


def check_device_name(value: Any, key: str) -> None:
    """Check the spelling of a device field: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

    Whether that device exists is checked when a run starts
    (:func:`agentic_rl.policy.device.resolve_placement`), not here: a config written on a
    laptop may name the GPU of the machine it will run on.

    Raises:
        ValueError: any other value (the message names ``key``).
    """
    if not isinstance(value, str) or not _DEVICE.match(value):
        raise ValueError(f"{key} must be auto, cpu, cuda or cuda:N, got {value!r}")
