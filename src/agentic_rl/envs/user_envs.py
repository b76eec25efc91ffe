"""Environments that live outside this package: ``module:attribute`` ids and entry points.

A user's env reaches every command (``train``, ``eval``, ``check-env``, ``replay``, ``view``)
in one of the two ways the field uses (Gymnasium's ``register(entry_point="module:Class")``,
Python packaging's entry points):

* **A ``module:attribute`` id**, e.g. ``agentic-rl train --env letter_count:LetterCountEnv``:
  ``attribute`` of the importable module ``module`` (a dotted path) is the env's factory, a
  class or a function that returns an :class:`~agentic_rl.envs.base.Env`. The module is
  imported from ``sys.path``, or else from the current directory (a console script such as
  ``agentic-rl`` does not put it on the path, ``python -m`` does). The id is what runs and
  records store, so ``eval``, ``replay`` and ``view`` of the run find the env again from the
  same directory or environment.
* **An entry point** of the group :data:`ENTRY_POINT_GROUP` in an installed distribution: its
  name is the env id (``name-vN``), its value the ``module:attribute`` factory, e.g. in the
  user's ``pyproject.toml``::

      [project.entry-points."agentic_rl.envs"]
      "letter-count-v0" = "letter_count:LetterCountEnv"

  Entry points are read only when an id is not registered here (lazily, as Gymnasium's
  plugins): a broken plugin never breaks the built-in envs.

The description shown by ``agentic-rl envs`` is the factory's ``description`` attribute or the
first line of its docstring; its ``recipe_overrides`` and ``warmup_kwargs`` attributes, when set,
are its recipe (a user's env has no registration call to declare them on). Its constructor
receives the run's :class:`~agentic_rl.envs.context.EnvContext` when it has a ``context``
parameter (:mod:`agentic_rl.envs.context`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from agentic_rl.errors import UnknownEnvError

__all__ = ["ENTRY_POINT_GROUP", "entry_point_ids", "is_import_path", "load_factory"]

#: the entry-point group of environments in installed distributions
ENTRY_POINT_GROUP = "agentic_rl.envs"

_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*$")


def is_import_path(env_id: str) -> bool:
    """True for a ``module:attribute`` id (a dotted module path, a colon, an attribute path)."""
    return bool(_PATH.match(env_id))


def _import(module: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0] or os.getcwd() in sys.path:
            raise
    sys.path.append(os.getcwd())  # a console script's path lacks the current directory
    return importlib.import_module(module)


def load_factory(path: str) -> tuple[Callable[..., Any], str]:
    """``(factory, description)`` of a ``module:attribute`` path.

    Raises:
        UnknownEnvError: the module cannot be imported, has no such attribute, or it is not
            callable (the message names which, and the import error).
    """
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = _import(module_name)
    except ImportError as exc:
        raise UnknownEnvError(
            f"env {path!r}: cannot import module {module_name!r} ({type(exc).__name__}: {exc}); "
            "it must be importable (installed, on PYTHONPATH, or a file in the current directory)"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UnknownEnvError(f"env {path!r}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UnknownEnvError(f"env {path!r}: {attr!r} is not a class or a function")
    return obj, _description(obj)


def _description(factory: Any) -> str:
    text = getattr(factory, "description", None)
    if not isinstance(text, str):
        text = (getattr(factory, "__doc__", None) or "").strip().split("\n")[0]
    return text.strip() or "(no description)"


def entry_point_ids() -> dict[str, str]:
    """``{env id: "module:attribute"}`` of the installed distributions' entry points of
    :data:`ENTRY_POINT_GROUP` (empty when none)."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
