"""Permission policy: which tool calls may run, decided before anything executes.

Every tool call passes :meth:`PermissionPolicy.decide` first (see
:mod:`agentic_rl.tools.governance.executor`). The policy is plain data, built from the TOML table
``[tools.permissions]`` with :meth:`PermissionPolicy.from_dict`::

    [tools.permissions]
    default = "deny"              # mode of tools the table does not list
    ask_default = false           # answer to "ask" when no callback is set (training)
    max_argument_bytes = 65536    # size limit of a call's JSON-encoded arguments

    [tools.permissions.side_effects]   # mode per side-effect class (these are the defaults)
    read_only = "allow"
    workspace_write = "allow"
    network = "deny"
    irreversible = "deny"

    [tools.permissions.tools.write_file]
    side_effect = "workspace_write"
    paths = { path = ["workspace/**"] }   # file-like argument -> allowed globs
    # mode = "ask"                        # optional: overrides the class's mode
    # max_argument_bytes = 1048576        # optional: overrides the global limit

Every key is checked when the table loads (an unknown key raises, naming it), and
:meth:`PermissionPolicy.check_tools` rejects a ``paths`` rule for an argument its tool does not
take (it could never apply: the call would run unchecked); the tool executor runs it on the
tools it is given.

Decision order for a call to tool ``t``:

1. mode: ``tools.t.mode`` if set, else ``side_effects[tools.t.side_effect]`` if ``t`` is listed,
   else ``default``. ``deny`` -> denied (risk ``"denied"``).
2. size: JSON-encoded arguments (UTF-8, a lone surrogate counted as U+FFFD) longer than the limit ->
   denied (``"argument_too_large"``).
3. paths: every listed file-like argument present in the call must be a string that, after
   normalisation, does not climb out with ``..``, is absolute only if a glob is absolute, and
   matches one of its globs -> otherwise denied (``"path_outside_workspace"``). Globs match the
   whole normalised path, as in gitignore: ``*`` and ``?`` match within one path component;
   ``**/`` matches zero or more leading directories (``**/*.py`` matches ``a.py`` and
   ``src/a.py``; ``a/**/b`` matches ``a/b``); ``/**`` at the end matches everything below
   (``workspace/**``); a bare ``**`` matches any relative path.
4. ``ask``: the callback ``ask(call) -> bool`` answers, or ``ask_default`` when there is none;
   a no (or a callback that raises) -> denied (``"denied"``).
5. otherwise allowed.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.types import ToolCall, valid_text

__all__ = ["Decision", "PermissionPolicy", "ToolPermission", "MODES", "SIDE_EFFECTS", "glob_match"]

MODES = ("allow", "deny", "ask")
SIDE_EFFECTS = ("read_only", "workspace_write", "network", "irreversible")
_DEFAULT_CLASS_MODES = {
    "read_only": "allow",
    "workspace_write": "allow",
    "network": "deny",
    "irreversible": "deny",
}
_PREFIX = "tools.permissions"


@dataclass(frozen=True)
class Decision:
    """The policy's verdict on one call.

    Attributes:
        allowed: whether the call may run.
        rule: the config rule that decided, e.g. ``"tools.write_file.paths.path"``.
        reason: human-readable why (shown to the policy model when denied).
        risk: risk category when denied (``"denied"``, ``"argument_too_large"``,
            ``"path_outside_workspace"``), None when allowed.
    """

    allowed: bool
    rule: str
    reason: str
    risk: str | None = None


@dataclass(frozen=True)
class ToolPermission:
    """Rules of one tool (``[tools.permissions.tools.<name>]``).

    Attributes:
        side_effect: one of :data:`SIDE_EFFECTS`.
        mode: ``allow``/``deny``/``ask``, or None to use the side-effect class's mode.
        paths: file-like argument name -> allowed globs.
        max_argument_bytes: per-tool size limit, or None for the policy's.
    """

    side_effect: str = "read_only"
    mode: str | None = None
    paths: tuple[tuple[str, tuple[str, ...]], ...] = ()
    max_argument_bytes: int | None = None


def _check_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a table, got {type(data).__name__}")
    for key in data:
        if key not in allowed:
            raise ValueError(f"unknown key {where}.{key} (allowed: {', '.join(sorted(allowed))})")


def _choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ValueError(f"{where} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _size(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where} must be a positive integer, got {value!r}")
    return value


def _tool_permission(data: Mapping[str, Any], where: str) -> ToolPermission:
    _check_keys(data, {"side_effect", "mode", "paths", "max_argument_bytes"}, where)
    paths = data.get("paths", {})
    if not isinstance(paths, Mapping):
        raise ValueError(
            f"{where}.paths must be a table of argument -> globs, got {type(paths).__name__}"
        )
    parsed = []
    for arg, globs in paths.items():
        if isinstance(globs, str):
            globs = [globs]
        if (
            not isinstance(globs, (list, tuple))
            or not globs
            or not all(isinstance(g, str) and g for g in globs)
        ):
            raise ValueError(
                f"{where}.paths.{arg} must be a non-empty list of glob strings, got {globs!r}"
            )
        parsed.append((str(arg), tuple(globs)))
    mode = data.get("mode")
    limit = data.get("max_argument_bytes")
    return ToolPermission(
        side_effect=_choice(
            data.get("side_effect", "read_only"), SIDE_EFFECTS, f"{where}.side_effect"
        ),
        mode=None if mode is None else _choice(mode, MODES, f"{where}.mode"),
        paths=tuple(parsed),
        max_argument_bytes=None if limit is None else _size(limit, f"{where}.max_argument_bytes"),
    )


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")  # zero or more whole directories
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(path: str, pattern: str) -> bool:
    """True if ``path`` (normalised) matches ``pattern`` and stays inside it.

    ``**/`` matches zero or more directories, any other ``**`` any characters including ``/``;
    ``*`` and ``?`` match within one path component (module docstring). A path that climbs out
    with ``..`` never matches; an absolute path matches only an absolute pattern. Never raises.
    """
    if not path or "\x00" in path:
        return False
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../") or "/../" in norm or norm.endswith("/.."):
        return False
    if posixpath.isabs(norm) != posixpath.isabs(pattern):
        return False
    return bool(_glob_regex(pattern).match(norm))


@dataclass(frozen=True)
class PermissionPolicy:
    """Permission policy of tool calls (see the module docstring for the rules and order).

    Attributes:
        default: mode of tools not listed in ``tools``.
        ask_default: answer to ``ask`` when ``ask`` (the callback) is None.
        max_argument_bytes: size limit of a call's JSON-encoded arguments.
        side_effects: side-effect class -> mode, as ``((class, mode), ...)``.
        tools: tool name -> :class:`ToolPermission`, as ``((name, rules), ...)``.
        ask: optional callback ``(ToolCall) -> bool`` answering ``ask`` decisions
            (interactive use); not part of the config, not compared.
    """

    default: str = "deny"
    ask_default: bool = False
    max_argument_bytes: int = 65536
    side_effects: tuple[tuple[str, str], ...] = tuple(_DEFAULT_CLASS_MODES.items())
    tools: tuple[tuple[str, ToolPermission], ...] = ()
    ask: Callable[[ToolCall], bool] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], ask: Callable[[ToolCall], bool] | None = None
    ) -> PermissionPolicy:
        """Build a policy from the ``[tools.permissions]`` table (a plain dict).

        Raises:
            ValueError: an unknown key (the message names it, e.g.
                ``tools.permissions.tools.write_file.pathz``) or a wrong value.
        """
        _check_keys(
            data, {"default", "ask_default", "max_argument_bytes", "side_effects", "tools"}, _PREFIX
        )
        classes = dict(_DEFAULT_CLASS_MODES)
        side = data.get("side_effects", {})
        _check_keys(side, set(SIDE_EFFECTS), f"{_PREFIX}.side_effects")
        for name, mode in side.items():
            classes[name] = _choice(mode, MODES, f"{_PREFIX}.side_effects.{name}")
        tools = data.get("tools", {})
        if not isinstance(tools, Mapping):
            raise ValueError(
                f"{_PREFIX}.tools must be a table of tool name -> rules, got {type(tools).__name__}"
            )
        ask_default = data.get("ask_default", False)
        if not isinstance(ask_default, bool):
            raise ValueError(f"{_PREFIX}.ask_default must be true or false, got {ask_default!r}")
        return cls(
            default=_choice(data.get("default", "deny"), MODES, f"{_PREFIX}.default"),
            ask_default=ask_default,
            max_argument_bytes=_size(
                data.get("max_argument_bytes", 65536), f"{_PREFIX}.max_argument_bytes"
            ),
            side_effects=tuple(classes.items()),
            tools=tuple(
                (str(n), _tool_permission(r, f"{_PREFIX}.tools.{n}")) for n, r in tools.items()
            ),
            ask=ask,
        )

    @classmethod
    def allow_all(cls, side_effects: Mapping[str, str]) -> PermissionPolicy:
        """A policy allowing exactly the given tools (``{name: side_effect}``), denying others.

        Raises:
            ValueError: an unknown side-effect class.
        """
        tools = {name: {"side_effect": se, "mode": "allow"} for name, se in side_effects.items()}
        return cls.from_dict({"default": "deny", "tools": tools})

    def check_tools(self, tools: Mapping[str, Any]) -> None:
        """Reject ``paths`` rules that can never apply to these tools (fail closed, at load).

        A path rule names a file-like argument; when the tool has no such parameter (a typo such
        as ``paths = { file = [...] }`` for ``write_file(path, content)``) the check would be
        skipped on every call. Tools the policy lists but ``tools`` lacks, and tools without a
        ``parameters`` object schema (``properties``), are not checked.

        Args:
            tools: ``{name: Tool}`` (anything with a JSON-Schema ``parameters`` attribute).

        Raises:
            ValueError: names the rule, e.g. ``tools.permissions.tools.write_file.paths.file``,
                and the tool's arguments.
        """
        for name, rules in self.tools:
            schema = getattr(tools.get(name), "parameters", None)
            props = schema.get("properties") if isinstance(schema, Mapping) else None
            if not isinstance(props, Mapping):
                continue
            for arg, _globs in rules.paths:
                if arg not in props:
                    raise ValueError(
                        f"{_PREFIX}.tools.{name}.paths.{arg}: tool '{name}' has no argument '{arg}' "
                        f"(its arguments: {', '.join(sorted(props)) or 'none'}), so this rule would "
                        "never apply"
                    )

    def check_tool_names(self, tools: Iterable[str]) -> None:
        """Reject rules for tools that are not in ``tools`` (the env's whole tool set).

        A rule for a tool the env does not have (a typo such as ``calculatr``) never applies:
        with ``default = "deny"`` every call of the real tool is then denied, with ``"allow"``
        it runs unchecked. Envs call this on a user's ``[tools.permissions]`` table once their
        tools are known (their built-in policies may list tools a configuration leaves out).

        Raises:
            ValueError: ``tools.permissions.tools.<name>: the env has no tool '<name>' (did
                you mean …?; its tools: …)``.
        """
        known = sorted(set(tools))
        for name, _rules in self.tools:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(
                    f"{_PREFIX}.tools.{name}: the env has no tool {name!r} ({hint}its tools: "
                    f"{', '.join(known) or 'none'})"
                )

    def rules_of(self, name: str) -> ToolPermission | None:
        """The :class:`ToolPermission` of tool ``name``, or None if unlisted. Never raises."""
        return dict(self.tools).get(name)

    def decide(self, call: ToolCall) -> Decision:
        """Decide whether ``call`` may run (order in the module docstring). Never raises."""
        rules = self.rules_of(call.name)
        if rules is None:
            mode, rule = self.default, "default"
        elif rules.mode is not None:
            mode, rule = rules.mode, f"tools.{call.name}.mode"
        else:
            mode, rule = (
                dict(self.side_effects)[rules.side_effect],
                f"side_effects.{rules.side_effect}",
            )
        if mode == "deny":
            return Decision(
                False,
                rule,
                f"tool '{call.name}' is denied by the permission policy ({rule})",
                "denied",
            )
        limit = (rules.max_argument_bytes if rules else None) or self.max_argument_bytes
        size = len(
            valid_text(json.dumps(call.arguments, ensure_ascii=False, default=str)).encode("utf-8")
        )
        if size > limit:
            where = (
                f"tools.{call.name}.max_argument_bytes"
                if rules and rules.max_argument_bytes
                else "max_argument_bytes"
            )
            return Decision(
                False,
                where,
                f"arguments are {size} bytes, over the limit of {limit}",
                "argument_too_large",
            )
        for arg, globs in rules.paths if rules else ():
            if arg not in call.arguments:
                continue
            value = call.arguments[arg]
            if not isinstance(value, str) or not any(glob_match(value, g) for g in globs):
                return Decision(
                    False,
                    f"tools.{call.name}.paths.{arg}",
                    f"argument '{arg}'={value!r} is outside the allowed paths ({', '.join(globs)})",
                    "path_outside_workspace",
                )
        if mode == "ask":
            return self._ask(call, rule)
        return Decision(True, rule, "allowed")

    def _ask(self, call: ToolCall, rule: str) -> Decision:
        if self.ask is None:
            answer, how = self.ask_default, "the configured default answer (ask_default)"
        else:
            try:
                answer, how = bool(self.ask(call)), "the ask callback"
            except Exception as exc:  # noqa: BLE001 - a broken callback denies, never crashes
                answer, how = False, f"the ask callback, which raised {type(exc).__name__}: {exc}"
        if answer:
            return Decision(True, rule, f"approved by {how}")
        return Decision(False, rule, f"tool '{call.name}' was refused by {how}", "denied")
