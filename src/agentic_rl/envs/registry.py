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

**Lazy entries.** An entry's factory is an *entry point*: a ``"module:attribute"`` string
imported on the first :func:`make` of the id (as Gymnasium's ``register(entry_point=...)``), or
the callable itself. An entry declares everything the commands read without building the env:
its description, default kwargs, ``recipe_overrides`` (``{dotted config key: value}`` that
``train --env ID`` applies, :mod:`agentic_rl.config.env_recipe`) and ``warmup_kwargs`` (the
warm-up's env kwargs). Listing ids imports no env module.

**The run's context.** :func:`make` takes ``context=EnvContext(...)`` (audit log, run id,
permissions: :mod:`agentic_rl.envs.context`) and passes it to a factory that has a ``context``
parameter; a factory without one is built without it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium

from agentic_rl.envs.context import CONTEXT_FIELDS, EnvContext
from agentic_rl.envs.user_envs import entry_point_ids, is_import_path, load_factory
from agentic_rl.errors import UnknownEnvError

if TYPE_CHECKING:
    from agentic_rl.envs.base import Env

_ID = re.compile(r"^[A-Za-z0-9_./-]+-v\d+$")

#: the namespace of agentic-rl ids in Gymnasium's registry
GYMNASIUM_NAMESPACE = "agentic_rl"


@dataclass(frozen=True)
class EnvSpec:
    """A registry entry: what the commands read about an env without building it.

    Attributes:
        env_id: the id (``name-vN``, a family member or a ``module:attribute`` id).
        entry_point: the factory (a class or function returning an
            :class:`~agentic_rl.envs.base.Env`), or its ``"module:attribute"`` path, imported on
            first use of :attr:`factory`.
        description: one line for ``agentic-rl envs``.
        kwargs: default constructor kwargs (a caller's kwargs override them).
        recipe_overrides: ``{dotted config key: value}`` the env's recipe sets (budgets,
            learning rates, env kwargs measured for it; :mod:`agentic_rl.config.env_recipe`).
        warmup_kwargs: the warm-up's env kwargs (e.g. the easiest level).
    """

    env_id: str
    entry_point: Callable[..., Env] | str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    recipe_overrides: Mapping[str, Any] = field(default_factory=dict)
    warmup_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def factory(self) -> Callable[..., Env]:
        """The factory (the entry point, imported on first use).

        Raises:
            UnknownEnvError: a string entry point that cannot be imported (the message says why).
        """
        if isinstance(self.entry_point, str):
            return load_factory(self.entry_point)[0]
        return self.entry_point

    @functools.cached_property
    def takes_context(self) -> bool:
        """Whether :func:`make` passes the factory an :class:`~agentic_rl.envs.context.EnvContext`
        (the rule: the factory has a parameter named ``context``; imports the entry point).

        Raises:
            UnknownEnvError: as :attr:`factory`.
        """
        try:
            params = inspect.signature(self.factory).parameters
        except (TypeError, ValueError):  # no signature to read (a builtin)
            return False
        context = params.get("context")
        return context is not None and context.kind is not inspect.Parameter.POSITIONAL_ONLY


_REGISTRY: dict[str, EnvSpec] = {}


@dataclass(frozen=True)
class EnvFamily:
    """A family of ids resolved on demand (e.g. ``rg/<task>-v0``): too many to register one by one.

    ``resolve`` and ``members`` may be ``"module:function"`` strings, imported on first use (so
    registering a family imports nothing).

    Attributes:
        pattern: the ids' shape, shown by ``agentic-rl envs`` (e.g. ``rg/<task>-v0``).
        prefix: every id of the family starts with it.
        resolve: ``resolve(env_id) -> EnvSpec`` of the member (its factory, description and
            recipe overrides); raises UnknownEnvError for an id with the prefix that names no
            member.
        description: one line for ``agentic-rl envs``.
        members: ``members() -> list of member names`` (for listings).
    """

    pattern: str
    prefix: str
    resolve: Callable[[str], EnvSpec] | str
    description: str
    members: Callable[[], list[str]] | str

    def resolve_spec(self, env_id: str) -> EnvSpec:
        """The member's :class:`EnvSpec` (see ``resolve``).

        Raises:
            UnknownEnvError: ``env_id`` names no member, or ``resolve`` cannot be imported.
        """
        return _load(self.resolve)(env_id)

    def member_names(self) -> list[str]:
        """The members' names (see ``members``). Raises what ``members`` raises (e.g.
        ImportError: the family's package is missing)."""
        return _load(self.members)()


def _load(function: Callable[..., Any] | str) -> Callable[..., Any]:
    """``function``, or the function its ``"module:function"`` path names (imported now).

    Raises:
        UnknownEnvError: the path cannot be loaded.
    """
    return load_factory(function)[0] if isinstance(function, str) else function


_FAMILIES: list[EnvFamily] = []


def register_family(family: EnvFamily) -> None:
    """Register a family of ids resolved on demand by :func:`make` and :func:`get_spec`.

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
        return user_spec(env_id, env_id)
    for family in _FAMILIES:
        if env_id.startswith(family.prefix):
            try:
                return family.resolve_spec(env_id)
            except UnknownEnvError as exc:
                raise _unknown_member(env_id, family, exc) from None
    plugin = entry_point_ids().get(env_id)
    if plugin is not None:
        return user_spec(env_id, plugin)
    raise _unknown_env(env_id)


def user_spec(env_id: str, path: str) -> EnvSpec:
    """The spec of a user's env (a ``module:attribute`` id or an entry point's value): the
    factory imported now; its ``recipe_overrides`` and ``warmup_kwargs`` attributes, when it
    has them, are the entry's (a user's env has no registration call to declare them on).

    Raises:
        UnknownEnvError: ``path`` cannot be loaded (:func:`~agentic_rl.envs.user_envs.load_factory`).
    """
    factory, description = load_factory(path)
    return EnvSpec(
        env_id,
        factory,
        description,
        recipe_overrides=dict(getattr(factory, "recipe_overrides", None) or {}),
        warmup_kwargs=dict(getattr(factory, "warmup_kwargs", None) or {}),
    )


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
        members = family.member_names()
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
        TypeError: naming the unknown keywords, the closest accepted one and every accepted one;
            for a ``permissions`` table the factory can take neither as ``permissions`` nor in a
            ``context``, a message that starts with ``tools.permissions``.
    """
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): the call will tell
        return
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    accepted = [name for name, p in params.items() if p.kind in named]
    if "permissions" in kwargs and "permissions" not in accepted:  # not even through **kwargs:
        raise TypeError(  # a table the env would not apply (or would pass on to a game's kwargs)
            f"tools.permissions is set, but env {env_id!r} takes no 'context' or 'permissions' "
            "argument (an env receives the run's EnvContext through a 'context' parameter)"
        )
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:
        raise TypeError(
            f"{env_id} takes no argument {', '.join(repr(k) for k in unknown)}"
            f"{_did_you_mean(unknown[0], accepted)} (its arguments: "
            f"{', '.join(accepted) or 'none'})"
        )


def register(
    env_id: str,
    entry_point: Callable[..., Env] | str,
    description: str,
    *,
    recipe_overrides: Mapping[str, Any] | None = None,
    warmup_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """Register an env id (nothing is imported: a string entry point loads on first use).

    Args:
        env_id: ``name-vN``.
        entry_point: the factory, or its ``"module:attribute"`` path.
        description: one line for ``agentic-rl envs``.
        recipe_overrides: ``{dotted config key: value}`` of the env's recipe (see
            :class:`EnvSpec`).
        warmup_kwargs: the warm-up's env kwargs.
        kwargs: default constructor kwargs.

    Raises:
        ValueError: the id is not of the form ``name-vN`` or is already registered.
    """
    if not _ID.match(env_id):
        raise ValueError(f"env id {env_id!r} must look like 'name-v0'")
    if env_id in _REGISTRY:
        raise ValueError(f"env id {env_id!r} is already registered")
    _REGISTRY[env_id] = EnvSpec(
        env_id,
        entry_point,
        description,
        dict(kwargs),
        dict(recipe_overrides or {}),
        dict(warmup_kwargs or {}),
    )
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
    ids = sorted(
        placeholder.sub(member, family.pattern, count=1) for member in family.member_names()
    )
    for env_id in ids:
        _register_in_gymnasium(env_id)
    return [gymnasium_id(env_id) for env_id in ids]


def make(env_id: str, context: EnvContext | None = None, **kwargs: Any) -> Env:
    """Create an env; ``kwargs`` override the entry's defaults.

    Args:
        env_id: a registered id, a family member, a ``module:attribute`` id or an installed
            entry point's id.
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`, passed as ``context``
            to a factory that takes one (see :mod:`agentic_rl.envs.context` for the rule and
            for the keywords ``permissions``/``audit_path``/``run_id``, folded into it).
        kwargs: the env's constructor kwargs.

    Raises:
        UnknownEnvError: the id is not registered (the message names the closest ids).
        TypeError: a keyword the env's factory does not take (the message lists those it
            takes).
    """
    spec = _spec(env_id)
    kwargs = {**spec.kwargs, **kwargs}
    if spec.takes_context:
        fields = {k: kwargs.pop(k) for k in CONTEXT_FIELDS if k in kwargs}
        kwargs["context"] = (kwargs.get("context") or context or EnvContext()).with_fields(fields)
    _check_kwargs(env_id, spec.factory, kwargs)
    env = spec.factory(**kwargs)
    env.env_id = env_id
    return env


def reset_level(env_id: str, seed: int, **kwargs: Any) -> str | None:
    """The difficulty level of task ``seed``: a fresh env's reset ``info["level"]`` as text, None
    when the env gives none (the env is closed again). What
    :attr:`~agentic_rl.types.Trajectory.level` reads from a rollout's trajectory. What the env's
    ``reset`` raises propagates.

    Raises:
        UnknownEnvError: the id is not registered (as :func:`make`).
        TypeError: a keyword the env's factory does not take (as :func:`make`).
    """
    env = make(env_id, **kwargs)
    try:
        level = env.reset(seed=seed)[1].get("level")
    finally:
        env.close()
    return None if level is None else str(level)


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
            out.append(user_spec(env_id, path))
        except UnknownEnvError as exc:
            out.append((env_id, str(exc)))
    return out
