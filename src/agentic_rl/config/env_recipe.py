"""An env's own recipe defaults, applied however the env is chosen.

The built-in defaults of :class:`~agentic_rl.config.TrainConfig` are calculator-v0's recipe (its
warm-up demonstrates only the level ``direct``, its budgets fit one-line answers). Another env
brings its own (:func:`env_recipe_defaults`): the run name ``<id>-grpo``, ``warmup.env_kwargs``
(the registry entry's ``warmup_kwargs``, default ``{}``) and the entry's ``recipe_overrides``
(budgets, learning rates, env kwargs measured for that env), as declared on its
:class:`~agentic_rl.envs.registry.EnvSpec`.

* ``agentic-rl train --env ID`` puts them as ``--set`` items before the user's own
  (:func:`agentic_rl.cli.main.env_overrides`): they replace the config file's values, and the
  user's ``--set`` items replace them.
* ``env.id`` set in a config file or with ``--set env.id=ID``: :func:`fill_env_recipe` fills
  them in for every key the file and the ``--set`` items leave unset (a key set there wins).

A saved run directory's ``config.toml`` holds every key, so nothing is filled in when it loads.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["env_recipe_defaults", "fill_env_recipe"]


def env_recipe_defaults(env_id: str) -> dict[str, Any]:
    """The recipe defaults of ``env_id`` as ``{dotted key: value}``; ``{}`` for the default env
    (its recipe is the built-in defaults).

    Raises:
        UnknownEnvError: the id is not registered.
    """
    from agentic_rl.config.sections import EnvConfig
    from agentic_rl.envs import get_spec

    spec = get_spec(env_id)
    if env_id == EnvConfig().id:
        return {}
    return {
        "name": f"{env_id.replace('/', '-')}-grpo",
        "warmup.env_kwargs": dict(spec.warmup_kwargs),
        **spec.recipe_overrides,
    }


def fill_env_recipe(data: dict[str, Any]) -> list[str]:
    """Fill the recipe defaults of ``data``'s ``env.id`` into the raw config table ``data`` (in
    place) for each key it does not set; returns the keys filled in.

    A key counts as set when ``data`` holds it, or a value that is not a table at one of its
    parents (``env.kwargs = 3`` is then reported by the loader, not overwritten here). An id
    that is not registered, or whose env cannot be made here, gets nothing: the run's
    validation reports it (:func:`agentic_rl.trainer.run.validate`). Never raises.
    """
    from agentic_rl.errors import AgenticRLError

    env = data.get("env")
    env_id = env.get("id") if isinstance(env, dict) else None
    if not isinstance(env_id, str):
        return []  # the default env, or a wrong type the loader reports
    try:
        defaults = env_recipe_defaults(env_id)
    except AgenticRLError:  # unknown id, missing optional package: validate() names it
        return []
    filled = []
    for key, value in defaults.items():
        *parents, last = key.split(".")
        node: Any = data
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if isinstance(node, dict) and last not in node:
            node[last] = copy.deepcopy(value)  # never share the factory's own tables
            filled.append(key)
    return filled
