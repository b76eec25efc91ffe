"""Registry of environment ids (``name-vN``), as users type them on the command line."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.errors import UnknownEnvError

_ID = re.compile(r"^[A-Za-z0-9_./-]+-v\d+$")


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment: id, factory, description and default kwargs."""

    env_id: str
    factory: Callable[..., Env]
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, EnvSpec] = {}


def register(env_id: str, factory: Callable[..., Env], description: str, **kwargs: Any) -> None:
    """Register an env id.

    Raises:
        ValueError: the id is not of the form ``name-vN`` or is already registered.
    """
    if not _ID.match(env_id):
        raise ValueError(f"env id {env_id!r} must look like 'name-v0'")
    if env_id in _REGISTRY:
        raise ValueError(f"env id {env_id!r} is already registered")
    _REGISTRY[env_id] = EnvSpec(env_id, factory, description, dict(kwargs))


def make(env_id: str, **kwargs: Any) -> Env:
    """Create a registered env; ``kwargs`` override the registered defaults.

    Raises:
        UnknownEnvError: the id is not registered (the message lists the registered ids).
    """
    spec = _REGISTRY.get(env_id)
    if spec is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise UnknownEnvError(f"unknown env id {env_id!r}; registered: {known}")
    env = spec.factory(**{**spec.kwargs, **kwargs})
    env.env_id = env_id
    return env


def accepts(env_id: str, parameter: str) -> bool:
    """True when the factory of a registered env takes a keyword ``parameter`` (e.g. ``audit_path``).

    Raises:
        UnknownEnvError: the id is not registered.
    """
    import inspect

    spec = _REGISTRY.get(env_id)
    if spec is None:
        raise UnknownEnvError(f"unknown env id {env_id!r}; registered: {', '.join(sorted(_REGISTRY)) or 'none'}")
    return parameter in inspect.signature(spec.factory).parameters


def registered() -> list[EnvSpec]:
    """All registered env specs, sorted by id."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
