"""Environment mixtures: ``[[env.mix]]`` entries, one run that trains on several environments.

A mixture names its envs in ``[[env.mix]]`` entries instead of ``env.id``::

    [[env.mix]]
    id = "calculator-v0"
    weight = 1.0

    [[env.mix]]
    id = "search-qa-v0"
    weight = 2.0
    rollout = { max_new_tokens = 128 }   # budgets of this env's episodes that differ

Each entry (:class:`MixEntry`) carries what differs per env: its constructor arguments, its
warm-up demonstrations, its held-out evaluation size and its rollout budgets. Every other key
(``[algorithm]``, ``[optim]``, ``[loss]``, ``[sampling]``, the warm-up's optimiser settings) is
run-wide. How the trainer uses the entries: :mod:`agentic_rl.trainer.sampling.mixture`.

Recipe defaults. Like ``train --env ID`` (:mod:`agentic_rl.config.env_recipe`), each entry takes
its env's recipe defaults for the keys it leaves unset (:func:`fill_mix_recipes`, at load):
``env.kwargs.*`` → ``kwargs``, ``warmup.env_kwargs`` → ``warmup_kwargs`` (calculator-v0's is the
built-in ``{levels = ["direct"]}``), ``rollout.<budget>`` → ``rollout``, ``eval.size`` →
``eval_size``. The run-wide keys an env's recipe sets (``algorithm.steps``,
``optim.lr_warmup_steps``, …) are not applied (one run has one optimiser); the loader logs them.

Checked at load, each error naming its key (``env.mix[1].weight``): an unknown env id, a
duplicate id (one entry per env: a trajectory's ``env_id`` names its entry), a weight <= 0,
unknown or out-of-range rollout keys, ``env.id``/``env.kwargs``/``warmup.env_kwargs`` set beside
``env.mix`` (a mixture's envs are its entries), and ``env.reward_norm`` without a mixture.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config import bounds
from agentic_rl.config.rules import check_rules, non_negative, positive

__all__ = [
    "MIX_ROLLOUT_KEYS",
    "MixEntry",
    "check_mix_entries",
    "check_mix_exclusive",
    "fill_mix_recipes",
    "mix_rollout",
]

log = logging.getLogger(__name__)

#: the ``[rollout]`` keys an entry may set for its own episodes (the sampler and its server are
#: run-wide)
MIX_ROLLOUT_KEYS = (
    "max_turns",
    "max_new_tokens",
    "max_total_tokens",
    "temperature",
    "context_max_tokens",
)

#: the ``[env]`` / ``[warmup]`` keys a mixture replaces with its entries
_SINGLE_ENV_KEYS = (("env", "id"), ("env", "kwargs"), ("warmup", "env_kwargs"))


@dataclass(frozen=True)
class MixEntry:
    """One ``[[env.mix]]`` entry: an env of a mixture run.

    Attributes:
        id: the registered env id (one entry per id).
        weight: relative share of the RL tasks (> 0; weights need not sum to 1): each task's env
            is drawn with probability weight / Σ weights (:mod:`agentic_rl.trainer.sampling.mixture`).
        kwargs: the env's constructor arguments (the run's ``[tools.permissions]`` is added for
            envs that take ``permissions``, as for ``env.kwargs``).
        warmup_kwargs: constructor arguments of its warm-up demonstrations, over ``kwargs``.
        warmup_demos: its number of oracle demonstrations (seeds ``warmup.seed_start …``);
            -1 (default) = its share of ``warmup.num_demos`` by weight (largest remainders).
        eval_size: its number of held-out tasks (seeds ``eval.seed_start …``); 0 = ``eval.size``.
        rollout: the ``[rollout]`` budgets of its episodes that differ from ``[rollout]``
            (keys :data:`MIX_ROLLOUT_KEYS`).
    """

    id: str = ""
    weight: float = positive(1.0)
    kwargs: dict[str, Any] = field(default_factory=dict)
    warmup_kwargs: dict[str, Any] = field(default_factory=dict)
    warmup_demos: int = -1
    eval_size: int = non_negative(0, bounds.MAX_EPISODES)
    rollout: dict[str, Any] = field(default_factory=dict)


def check_mix_entries(entries: tuple[MixEntry, ...], reward_norm: str) -> None:
    """Check ``env.mix`` (each entry's rules, ids present and distinct) and that
    ``env.reward_norm`` has a mixture to act on.

    Raises:
        ValueError: ``key 'env.mix[i].<field>' ...`` naming the entry's key.
    """
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        key = f"env.mix[{i}]"
        if not isinstance(entry, MixEntry):
            raise ValueError(f"key '{key}' must be a table of id, weight, kwargs, …")
        check_rules(entry, key)
        if not entry.id:
            raise ValueError(f"key '{key}.id' must name an env (see agentic-rl envs)")
        if entry.id in seen:
            raise ValueError(
                f"key '{key}.id': {entry.id} is already env.mix[{seen[entry.id]}]; a mixture "
                "has one entry per env (its trajectories' env_id names the entry)"
            )
        seen[entry.id] = i
        if not -1 <= entry.warmup_demos <= bounds.MAX_EPISODES:
            raise ValueError(
                f"key '{key}.warmup_demos' must be -1 (its share of warmup.num_demos) or in "
                f"[0, {bounds.MAX_EPISODES}], got {entry.warmup_demos!r}"
            )
        unknown = sorted(set(entry.rollout) - set(MIX_ROLLOUT_KEYS))
        if unknown:
            raise ValueError(
                f"key '{key}.rollout.{unknown[0]}' is not a per-env rollout key (known: "
                f"{', '.join(MIX_ROLLOUT_KEYS)}; the others are run-wide, in [rollout])"
            )
    if reward_norm != "none" and not entries:
        raise ValueError(
            f"key 'env.reward_norm' = {reward_norm!r} scales each env of a mixture: it needs "
            "[[env.mix]] entries"
        )


def mix_rollout(base: Any, entry: MixEntry, index: int, rules: dict[str, Any]) -> Any:
    """``base`` (the run's :class:`~agentic_rl.rollout.engine.RolloutConfig`) with the entry's
    ``rollout`` keys, each checked for type and range with ``rules`` (the loader's ``[rollout]``
    bounds, keyed ``rollout.<key>``).

    Raises:
        ValueError: ``key 'env.mix[i].rollout.<key>' ...`` (a wrong type, a value out of range,
            or budgets that do not fit together).
    """
    prefix = f"env.mix[{index}].rollout"
    hints = typing.get_type_hints(type(base))
    for name, value in entry.rollout.items():
        want = hints[name]
        is_int = isinstance(value, int) and not isinstance(value, bool)
        ok = is_int if want is int else is_int or isinstance(value, float)
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(
                f"key '{prefix}.{name}' must be a finite {want.__name__}, got {value!r}"
            )
        rule = rules.get(f"rollout.{name}")
        if rule is not None:
            rule.check(f"{prefix}.{name}", value)
    try:
        return dataclasses.replace(base, **entry.rollout)
    except ValueError as exc:
        raise ValueError(f"key '{prefix}': {exc}") from None


def check_mix_exclusive(data: dict[str, Any]) -> str | None:
    """The first of ``env.id``, ``env.kwargs``, ``warmup.env_kwargs`` that the raw config table
    ``data`` sets beside a non-empty ``env.mix`` (a mixture's envs are its entries), else None
    (a single-env run's saved config holds ``mix = []``)."""
    env = data.get("env")
    if not isinstance(env, dict) or not env.get("mix"):
        return None
    for section, key in _SINGLE_ENV_KEYS:
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            return f"{section}.{key}"
    return None


def _entry_defaults(env_id: str) -> dict[str, Any]:
    """The recipe defaults of ``env_id`` (``{dotted key: value}``, calculator-v0's built-in
    warm-up level included).

    Raises:
        UnknownEnvError: the id is not registered.
    """
    from agentic_rl.config.env_recipe import env_recipe_defaults
    from agentic_rl.config.sections import WarmupConfig

    defaults = env_recipe_defaults(env_id)
    return defaults or {"warmup.env_kwargs": WarmupConfig().env_kwargs}


def _place(entry: dict[str, Any], key: str) -> tuple[str, str | None] | None:
    """Where recipe key ``key`` goes in an entry: ``(field, subkey or None)``; None = run-wide."""
    if key.startswith("env.kwargs."):
        return "kwargs", key.removeprefix("env.kwargs.")
    if key == "warmup.env_kwargs":
        return "warmup_kwargs", None
    if key == "eval.size":
        return "eval_size", None
    if key.startswith("rollout.") and key.removeprefix("rollout.") in MIX_ROLLOUT_KEYS:
        return "rollout", key.removeprefix("rollout.")
    return None


def fill_mix_recipes(data: dict[str, Any]) -> list[str]:
    """Fill each ``[[env.mix]]`` entry of the raw config table ``data`` (in place) with its env's
    recipe defaults for the keys it leaves unset (module docstring), and ``name`` with
    ``mixture-grpo`` when unset; returns the run-wide recipe keys left out (``"<id>: key =
    value"``), which are also logged.

    Entries that are not tables, or whose id is not a string, are left for the loader to report.

    Raises:
        UnknownEnvError: an entry's id is not registered (the message says which entry).
    """
    from agentic_rl.errors import UnknownEnvError

    env = data.get("env")
    mix = env.get("mix") if isinstance(env, dict) else None
    if not isinstance(mix, list) or not mix:
        return []
    data.setdefault("name", "mixture-grpo")
    skipped: list[str] = []
    for i, entry in enumerate(mix):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        try:
            defaults = _entry_defaults(entry["id"])
        except UnknownEnvError as exc:
            raise UnknownEnvError(f"key 'env.mix[{i}].id': {exc}") from None
        for key, value in defaults.items():
            place = _place(entry, key)
            if place is None:
                if key != "name":
                    skipped.append(f"{entry['id']}: {key} = {value!r}")
                continue
            name, sub = place
            if sub is None:
                entry.setdefault(name, copy.deepcopy(value))
            elif isinstance(entry.setdefault(name, {}), dict):
                entry[name].setdefault(sub, copy.deepcopy(value))
    if skipped:
        log.warning(
            "env.mix: run-wide keys of the envs' recipes are not applied (set them in the "
            "config if wanted): %s",
            "; ".join(skipped),
        )
    return skipped
