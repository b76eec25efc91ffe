"""Registry of environment ids (``name-vN``), as users type them on the command line.

Envs of the user's own package need no registration here: a ``module:Class`` id or an entry
point of the group ``agentic_rl.envs`` (:mod:`agentic_rl.envs.user_envs`) reaches every command.

Every id registered here is also registered in Gymnasium's registry as ``agentic_rl/<id>``
(:func:`gymnasium_id`), so ``gymnasium.make("agentic_rl/calculator-v0")`` works once
:mod:`agentic_rl.envs` is imported (Gymnasium 1.x has no plugin entry points; the
``"agentic_rl.envs:agentic_rl/calculator-v0"`` form imports it for you). The Gymnasium entry
is lazy: the string entry point ``agentic_rl.envs.registry:make`` with ``env_id`` as its one
keyword, so registering imports nothing and builds nothing; ``gymnasium.make`` calls
:func:`make` (this registry's defaults, then the caller's keywords) and wraps the env in
Gymnasium's usual ``PassiveEnvChecker`` and ``OrderEnforcing`` (no ``TimeLimit``: each env
applies its own limit, the rollout engine its budgets). Members of an id family
(``rg/<task>-v0``) are many and listing them imports their package, so they enter Gymnasium's
registry only when :func:`register_family_in_gymnasium` is called.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from agentic_rl.envs.base import Env
from agentic_rl.envs.user_envs import entry_point_ids, is_import_path, load_factory
from agentic_rl.errors import UnknownEnvError

_ID = re.compile(r"^[A-Za-z0-9_./-]+-v\d+$")

#: the namespace of agentic-rl ids in Gymnasium's registry
GYMNASIUM_NAMESPACE = "agentic_rl"


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


def _spec(env_id: str) -> EnvSpec:
    """The spec of a registered id, a family member, a ``module:attribute`` id or an installed
    entry point (:mod:`agentic_rl.envs.user_envs`).

    Raises:
        UnknownEnvError: :func:`_unknown_env`'s message; a ``module:attribute`` id or an entry
            point that cannot be loaded (the message says why).
    """
    spec = _REGISTRY.get(env_id)
    if spec is not None:
        return spec
    if is_import_path(env_id):
        return EnvSpec(env_id, *load_factory(env_id))
    for family in _FAMILIES:
        if env_id.startswith(family.prefix):
            try:
                factory, description = family.resolve(env_id)
            except UnknownEnvError as exc:
                raise _unknown_member(env_id, family, exc) from None
            return EnvSpec(env_id, factory, description)
    plugin = entry_point_ids().get(env_id)
    if plugin is not None:
        return EnvSpec(env_id, *load_factory(plugin))
    raise _unknown_env(env_id)


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=3)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _unknown_env(env_id: str) -> UnknownEnvError:
    """The error for an id that no registration and no family prefix matches: the closest ids
    (difflib), and where the full list is, never the whole list on one line."""
    ids = sorted(_REGISTRY)
    prefixes = [f.prefix for f in _FAMILIES]
    return UnknownEnvError(
        f"unknown env id {env_id!r}{_did_you_mean(env_id, ids + prefixes)} "
        f"(`agentic-rl envs` lists the {len(ids)} ids and {len(prefixes)} id families; an env "
        "of your own: module:Class or an agentic_rl.envs entry point)"
    )


def _unknown_member(env_id: str, family: EnvFamily, error: UnknownEnvError) -> UnknownEnvError:
    """``error`` of a family that does not resolve ``env_id``, with the closest member ids in
    place of its list of members; ``error`` itself when the family cannot list its members."""
    try:
        members = family.members()
    except Exception:  # a family that cannot list its members keeps its own error
        return error
    if not members:
        return error
    placeholder = re.compile(r"<[^>]+>")
    ids = [placeholder.sub(m, family.pattern, count=1) for m in members]
    why = f": {error.reason}" if error.reason else ""
    return UnknownEnvError(
        f"unknown env id {env_id!r}{why}{_did_you_mean(env_id, ids)} (ids of this family look "
        f"like {family.pattern}; `agentic-rl envs` lists its {len(ids)} members)",
        error.reason,
    )


def _check_kwargs(env_id: str, factory: Callable[..., Env], kwargs: dict[str, Any]) -> None:
    """Reject keywords the factory does not take (a factory with ``**kwargs`` takes any).

    Raises:
        TypeError: naming the unknown keywords, the closest accepted one and every accepted one.
    """
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): the call will tell
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    accepted = [name for name, p in params.items() if p.kind in named]
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:
        raise TypeError(
            f"{env_id} takes no argument {', '.join(repr(k) for k in unknown)}"
            f"{_did_you_mean(unknown[0], accepted)} (its arguments: "
            f"{', '.join(accepted) or 'none'})"
        )


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
    _register_in_gymnasium(env_id)


def gymnasium_id(env_id: str) -> str:
    """The id of ``env_id`` in Gymnasium's registry: ``agentic_rl/<id>``, with each ``/`` of
    ``env_id`` written ``.`` (Gymnasium's ids hold one namespace only), e.g.
    ``agentic_rl/calculator-v0``, ``agentic_rl/rg.leg_counting-v0``. Never raises."""
    return f"{GYMNASIUM_NAMESPACE}/{env_id.replace('/', '.')}"


_GYM_ENTRY = "agentic_rl.envs.registry:make"


def _register_in_gymnasium(env_id: str) -> None:
    """Add ``env_id``'s entry to Gymnasium's registry (kept as is when it is already there:
    re-registering an id, as tests do, then neither warns nor changes it)."""
    gym_id = gymnasium_id(env_id)
    existing = gymnasium.registry.get(gym_id)
    if existing is not None and (existing.entry_point, existing.kwargs) == (
        _GYM_ENTRY,
        {"env_id": env_id},
    ):
        return
    gymnasium.register(gym_id, entry_point=_GYM_ENTRY, kwargs={"env_id": env_id})


def register_family_in_gymnasium(prefix: str) -> list[str]:
    """Register every member of the family with ``prefix`` in Gymnasium's registry.

    Returns:
        The Gymnasium ids of the family's members (:func:`gymnasium_id`), sorted (an id already
        registered the same way is left as it is).

    Raises:
        UnknownEnvError: no family has ``prefix``.
        Whatever the family's ``members()`` raises (e.g. ImportError: its package is missing).
    """
    family = next((f for f in _FAMILIES if f.prefix == prefix), None)
    if family is None:
        known = ", ".join(f.prefix for f in _FAMILIES) or "none"
        raise UnknownEnvError(f"no env family with prefix {prefix!r}; families: {known}")
    placeholder = re.compile(r"<[^>]+>")
    ids = sorted(placeholder.sub(member, family.pattern, count=1) for member in family.members())
    for env_id in ids:
        _register_in_gymnasium(env_id)
    return [gymnasium_id(env_id) for env_id in ids]


def make(env_id: str, **kwargs: Any) -> Env:
    """Create a registered env; ``kwargs`` override the registered defaults.

    Raises:
        UnknownEnvError: the id is not registered (the message names the closest ids).
        TypeError: a keyword the env's factory does not take (the message lists those it
            takes).
    """
    spec = _spec(env_id)
    kwargs = {**spec.kwargs, **kwargs}
    _check_kwargs(env_id, spec.factory, kwargs)
    env = spec.factory(**kwargs)
    env.env_id = env_id
    return env


def accepts(env_id: str, parameter: str) -> bool:
    """True when the factory of a registered env takes a keyword ``parameter`` (e.g. ``audit_path``).

    Raises:
        UnknownEnvError: the id is not registered.
    """
    spec = _spec(env_id)
    return parameter in inspect.signature(spec.factory).parameters


def get_spec(env_id: str) -> EnvSpec:
    """The spec of a registered id or of a family member.

    Raises:
        UnknownEnvError: the id is not registered and no family resolves it.
    """
    return _spec(env_id)


def registered() -> list[EnvSpec]:
    """All registered env specs, sorted by id (installed entry points not included:
    :func:`plugins`)."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def plugins() -> list[EnvSpec | tuple[str, str]]:
    """The installed entry points of :data:`~agentic_rl.envs.user_envs.ENTRY_POINT_GROUP` not
    shadowed by a registered id, sorted: their spec, or ``(id, why it does not load)``."""
    out: list[EnvSpec | tuple[str, str]] = []
    for env_id, path in sorted(entry_point_ids().items()):
        if env_id in _REGISTRY:
            continue
        try:
            out.append(EnvSpec(env_id, *load_factory(path)))
        except UnknownEnvError as exc:
            out.append((env_id, str(exc)))
    return out
