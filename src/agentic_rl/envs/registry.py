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


@dataclass(frozen=True)
class EnvFamily:
    """A family of ids resolved on demand (e.g. ``rg/<task>-v0``): too many to register one by one.

    Attributes:
        pattern: the ids' shape, shown by ``agentic-rl envs`` (e.g. ``rg/<task>-v0``).
        prefix: every id of the family starts with it.
        resolve: ``resolve(env_id) -> (factory, description)``; raises UnknownEnvError for an
            id with the prefix that names no member.
        description: one line for ``agentic-rl envs``.
        members: ``members() -> list of member names`` (for listings).
    """

    pattern: str
    prefix: str
    resolve: Callable[[str], tuple[Callable[..., Env], str]]
    description: str
    members: Callable[[], list[str]]


_FAMILIES: list[EnvFamily] = []


def register_family(family: EnvFamily) -> None:
    """Register a family of ids resolved on demand by :func:`make` and :func:`accepts`.

    Raises:
        ValueError: a family with the same prefix exists.
    """
    if any(f.prefix == family.prefix for f in _FAMILIES):
        raise ValueError(f"an env family with prefix {family.prefix!r} is already registered")
    _FAMILIES.append(family)


def families() -> list[EnvFamily]:
    """The registered id families, in registration order."""
    return list(_FAMILIES)


def _spec(env_id: str) -> EnvSpec | None:
    spec = _REGISTRY.get(env_id)
    if spec is None:
        for family in _FAMILIES:
            if env_id.startswith(family.prefix):
                factory, description = family.resolve(env_id)
                return EnvSpec(env_id, factory, description)
    return spec


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
    spec = _spec(env_id)
    if spec is None:
        known = ", ".join(sorted(_REGISTRY) + [f.pattern for f in _FAMILIES]) or "none"
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

    spec = _spec(env_id)
    if spec is None:
        raise UnknownEnvError(
            f"unknown env id {env_id!r}; registered: {', '.join(sorted(_REGISTRY)) or 'none'}"
        )
    return parameter in inspect.signature(spec.factory).parameters


def get_spec(env_id: str) -> EnvSpec:
    """The spec of a registered id or of a family member.

    Raises:
        UnknownEnvError: the id is not registered and no family resolves it.
    """
    spec = _spec(env_id)
    if spec is None:
        raise UnknownEnvError(
            f"unknown env id {env_id!r}; registered: "
            f"{', '.join(sorted(_REGISTRY) + [f.pattern for f in _FAMILIES]) or 'none'}"
        )
    return spec


def registered() -> list[EnvSpec]:
    """All registered env specs, sorted by id."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
