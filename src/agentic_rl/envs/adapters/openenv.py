"""OpenEnv environments (``openenv-core`` 0.3.0, extra ``openenv``) as agentic-rl envs: ``openenv/<module>-v0``.

An OpenEnv env is a server: a package ``<module>`` laid out as ``openenv init`` writes one (and
as ``openenv-<name>`` distributions install one), whose ``<module>.server.app:app`` is the
FastAPI app of OpenEnv's ``create_app`` (routes ``/ws``, ``/reset``, ``/step``, ``/schema``,
``/health``). ``make("openenv/products_env-v0")`` builds an :class:`OpenEnvEnv` for the module
``products_env``; the module must be importable by the server's Python (installed, or on
``PYTHONPATH``). Nothing is fetched from a hub: OpenEnv's Docker and Hub launchers are not used.

Server
    Its own process: ``python -m uvicorn <module>.server.app:app`` on 127.0.0.1 with a free
    port, started on the first ``reset`` (lazily), health-waited (``GET /health``), stopped by
    ``close()`` and by a finalizer when the env is garbage collected (terminate, then kill its
    process group). One server per env instance, one WebSocket session on it: OpenEnv's HTTP
    ``/step`` builds a fresh env per request, so multi-turn episodes use the WebSocket.
Client
    OpenEnv's own ``GenericEnvClient`` (JSON dicts, no env-specific classes needed here), sync.
Observation
    The foreign observation is a dict of fields (``done``/``reward`` apart). The message is
    the one string field when there is exactly one (e.g. ``prompt``), else one ``key: value``
    line per field, sorted. The role is ``user``.
Action
    ``Action.text`` (the decoded sampled text, unchanged: no re-tokenization, no parsing) is
    put in the action's one string field, found in the server's ``/schema`` (or named with
    ``action_field``).
MCP envs (OpenEnv RFC 003: the server takes ``ListToolsAction``/``CallToolAction``)
    On reset the adapter lists the tools (``list_tools``) and offers them: the observation's
    ``tools`` and a system message with their schemas. A step runs the action's tool calls
    (parsed by the engine) in order, each as one ``call_tool`` step, through a
    :class:`~agentic_rl.tools.governance.executor.ToolExecutor` (permission policy, audit log,
    typed ``ToolResult`` s, one ``tool`` message each). A call's text is the result's text
    blocks; OpenEnv's ``error`` (unknown tool, bad arguments, the tool raised) is an error
    result. The step's reward is the sum of its calls' rewards; a call answered ``done`` ends
    the episode and the turn's later calls are not run. A reply without tool calls gets a
    ``user`` message saying the env acts through tools (reward 0). The tools run in the
    server's process, not in agentic-rl's sandbox.
Reward
    ``step`` returns OpenEnv's reward of the step (None counts 0, kept as None in
    ``info["openenv_reward"]``). Rubric: outcome ``openenv_outcome`` = the final reward of an
    episode OpenEnv ended (``done``), mapped from ``reward_range`` to [0, 1] and clipped; 0
    when the episode was truncated. ``openenv_return`` (Σ of OpenEnv's rewards) is a weight-0
    metric; cost ``generated_tokens``.
Errors
    A foreign error is loud, never a silent 0: a server that does not start raises
    :class:`~agentic_rl.errors.EnvUnavailableError` (with its stderr), an error answered by the
    server on ``reset``/``step`` (the env raised, the action failed validation) raises
    :class:`OpenEnvError`, so the rollout engine marks the episode ``StopReason.ERROR`` and
    excludes it from training. In an MCP env a failed call is that call's error result.
Horizon
    OpenEnv's ``done`` ends the episode (terminated); ``max_turns`` steps without it truncate.
Oracle
    OpenEnv defines none. :func:`register_openenv_oracle` adds a scripted policy for a module
    (a function of the foreign observation dict); without one ``oracle_reply`` is None, the
    ``train`` shortcut turns the warm-up and guidance off, and ``check-env``'s oracle check
    fails with that reason (it has no skip).
Snapshots
    Not supported: rollback replays from ``reset(seed)``.

Reference: OpenEnv ``openenv/core/env_server/http_server.py`` (routes, WebSocket sessions) and
``openenv/core/generic_client.py``.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import weakref
from collections.abc import Callable
from typing import Any

from agentic_rl.envs.adapters.openenv_server import OpenEnvServer, shut
from agentic_rl.envs.base import Env
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.registry import EnvSpec
from agentic_rl.errors import AgenticRLError, EnvUnavailableError, UnknownEnvError
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.costs import token_cost
from agentic_rl.tools.definition.prompt import render_tool_system_prompt
from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import Action, Message, Observation, Trajectory

__all__ = [
    "OPENENV_PATTERN",
    "OpenEnvEnv",
    "OpenEnvError",
    "OpenEnvServer",
    "register_openenv_oracle",
    "resolve_openenv_id",
]

OPENENV_PATTERN = "openenv/<module>-v0"
OPENENV_PREFIX = "openenv/"
_OPENENV_ID = re.compile(r"^openenv/([A-Za-z_][A-Za-z0-9_.]*)-v(\d+)$")
INSTALL = "pip install 'agentic-rl[openenv]'"
_OBS_SKIP = ("done", "reward", "metadata")
MCP_INSTRUCTIONS = "Act in this environment by calling its tools."

#: scripted policies by module: ``oracle(observation_dict) -> reply or None``
_ORACLES: dict[str, Callable[[dict[str, Any]], str | None]] = {}

#: config keys the ``train --env`` shortcut sets before the user's ``--set``
OPENENV_RECIPE: dict[str, Any] = {"rollout.max_new_tokens": 96}


class OpenEnvError(AgenticRLError, RuntimeError):
    """The OpenEnv server answered ``reset`` or ``step`` with an error (the message says which)."""


def register_openenv_oracle(module: str, oracle: Callable[[dict[str, Any]], str | None]) -> None:
    """Give the envs of ``module`` a scripted reference policy (warm-up demos, ``check-env``).

    ``oracle`` gets the foreign observation dict of the current state and returns the reply
    to send, or None when it has none. A second registration for a module replaces the first.
    """
    _ORACLES[module] = oracle


def _require_openenv() -> Any:
    try:
        return importlib.import_module("openenv.core.generic_client")
    except ImportError as exc:
        raise EnvUnavailableError(
            f"openenv/* envs need the 'openenv-core' package ({exc}); install it with {INSTALL}"
        ) from None


def _action_field(schema: dict[str, Any]) -> str:
    """The one string field of an action JSON Schema (``metadata`` apart).

    Raises:
        UnknownEnvError: none or several (name one with ``action_field``).
    """
    props = schema.get("properties", {})
    names = [k for k, v in props.items() if k != "metadata" and v.get("type") == "string"]
    if len(names) != 1:
        raise UnknownEnvError(
            f"the env's action has {len(names)} string fields ({names}); name the one that "
            f"gets the reply with action_field=... (fields: {sorted(props)})"
        )
    return names[0]


def _tool_text(result: Any) -> str:
    """The text of an MCP ``call_tool`` result: its text blocks joined, else its JSON. Never raises."""
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        texts = [b.get("text", "") for b in result["content"] if isinstance(b, dict)]
        if any(texts):
            return "\n".join(t for t in texts if t)
    return json.dumps(result, default=str)


def render_observation(observation: dict[str, Any]) -> str:
    """The text of a foreign observation dict (module docstring). Never raises."""
    fields = {k: v for k, v in observation.items() if k not in _OBS_SKIP}
    texts = [v for v in fields.values() if isinstance(v, str)]
    if len(texts) == 1:
        return texts[0]
    return "\n".join(f"{k}: {json.dumps(v, default=str)}" for k, v in sorted(fields.items()))


class OpenEnvEnv(Env):
    """An OpenEnv env served by its own local process (see the module docstring).

    Args:
        module: the OpenEnv env package (its ``server.app:app`` is served).
        max_turns: horizon in steps, >= 1.
        action_field: the action field that gets the reply; None finds the one string field
            (ignored for an MCP env).
        reward_range: ``(low, high)`` of the env's final reward, mapped to [0, 1]; low < high.
        python: the interpreter that runs the server (default: this one).
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table for an MCP env's tools (default:
            each tool allowed, side effect ``workspace_write``: it changes the env's state).

    Raises:
        ValueError: ``max_turns`` < 1, an empty ``reward_range``, a wrong ``permissions`` table.
        EnvUnavailableError: ``openenv-core`` is not installed (the message names the extra).
    """

    description = "An OpenEnv env served locally (extra 'openenv')"

    def __init__(
        self,
        module: str,
        max_turns: int = 5,
        action_field: str | None = None,
        reward_range: tuple[float, float] = (0.0, 1.0),
        python: str | None = None,
        context: EnvContext = EnvContext(),
    ):
        permissions, audit_path, run_id = context.permissions, context.audit_path, context.run_id
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if not reward_range[0] < reward_range[1]:
            raise ValueError(
                f"reward_range must be (low, high) with low < high, got {reward_range}"
            )
        self._generic = _require_openenv()
        self.module, self.max_turns, self.action_field = module, int(max_turns), action_field
        self.reward_range = (float(reward_range[0]), float(reward_range[1]))
        self.permissions = None if permissions is None else PermissionPolicy.from_dict(permissions)
        self._audit = AuditLog(audit_path) if audit_path else None
        self._context = {"run_id": run_id}
        self.server = OpenEnvServer(f"{module}.server.app:app", python)
        self._client: list[Any] = []  # the sync client, once the server runs
        self._finalizer = weakref.finalize(self, shut, self.server, self._client)
        self.mcp = False  # the server takes OpenEnv's MCP actions (RFC 003 tools)
        self.executor: ToolExecutor | None = None
        self._obs: dict[str, Any] | None = None
        self._turn_reward, self._turn_done, self._turn_obs = 0.0, False, []

    def _connect(self) -> Any:
        """The sync client of this env's server, starting the server on first use."""
        if not self._client:
            self.server.start()
            schema = self.server.schema().get("action", {})
            self.mcp = {"tool_name", "arguments"} <= set(schema.get("properties", {}))
            if self.action_field is None and not self.mcp:
                self.action_field = _action_field(schema)
            client = self._generic.GenericEnvClient(base_url=self.server.base_url).sync()
            self._client.append(client)
        return self._client[0]

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every foreign error is re-raised, named
            raise OpenEnvError(
                f"OpenEnv env {self.module!r}: {what} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """OpenEnv's ``reset(seed=...)`` on this env's session (the server starts if needed);
        for an MCP env also ``list_tools``, offered as the observation's tools.

        Raises:
            EnvUnavailableError: the server did not start.
            OpenEnvError: the server answered with an error.
        """
        seed = self.start_episode(seed, options)
        client = self._connect()
        result = self._call("reset", lambda: client.reset(seed=seed))
        self._obs = dict(result.observation)
        info = {"openenv_module": self.module, "openenv_observation": _json_safe(self._obs)}
        user = Message("user", render_observation(self._obs))
        if not self.mcp:
            return Observation(messages=(user,)), info
        listed = self._call("list_tools", lambda: client.step({"type": "list_tools"}))
        schemas = self._setup_tools(listed.observation.get("tools") or [])
        system = Message("system", render_tool_system_prompt(MCP_INSTRUCTIONS, schemas))
        return Observation(messages=(system, user), tools=schemas), info

    def _setup_tools(self, listed: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
        """Wrap the server's MCP tools as :class:`Tool` values run by a :class:`ToolExecutor`."""
        tools = {}
        for t in listed:
            params = dict(t.get("input_schema") or {"properties": {}})
            params.setdefault("type", "object")
            fn = functools.partial(self._call_tool, t["name"])
            tools[t["name"]] = Tool(t["name"], t.get("description") or "", params, fn)
        default = PermissionPolicy.allow_all({name: "workspace_write" for name in tools})
        policy = self.permissions or default
        self.executor = ToolExecutor(tools, policy, self._audit, self._context)
        return tuple(tool.schema() for tool in tools.values())

    def _call_tool(self, name: str, **arguments: Any) -> str:
        """One ``call_tool`` step (the tool's function): its text, or an error raised."""
        if self._turn_done:
            raise RuntimeError("not run: the episode ended at an earlier call of this turn")
        message = {"type": "call_tool", "tool_name": name, "arguments": arguments}
        result = self._call(f"call_tool {name}", lambda: self._client[0].step(message))
        self._turn_reward += float(result.reward or 0.0)
        self._turn_done = self._turn_done or bool(result.done)
        obs = dict(result.observation)
        self._turn_obs.append(obs)
        if obs.get("error"):
            raise RuntimeError(f"{obs['error'].get('error_type')}: {obs['error'].get('message')}")
        return _tool_text(obs.get("result"))

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Send ``action.text`` in the action field, or, for an MCP env, run the action's tool
        calls as ``call_tool`` steps (module docstring).

        Raises:
            EpisodeNotStartedError: before ``reset``.
            EpisodeEndedError: after the episode ended.
            OpenEnvError: the server answered with an error (the env raised, a bad action);
                in an MCP env such an error of one call is that call's error result instead.
        """
        self.check_step(self._obs is not None)
        if self.mcp:
            obs, raw, done, info = self._tool_step(action)
        else:
            client = self._client[0]
            result = self._call("step", lambda: client.step({self.action_field: action.text}))
            self._obs, raw, done = dict(result.observation), result.reward, bool(result.done)
            text = render_observation(self._obs)
            obs = Observation(messages=(Message("user", text),) if text else ())
            info = {"openenv_observation": _json_safe(self._obs)}
        self.count_turn()
        reward = float(raw or 0.0)
        truncated = not done and self.episode.turn >= self.max_turns
        if done or truncated:
            self.end_episode()
        info.update(
            openenv_reward=raw,
            openenv_outcome=self.normalise(reward) if done else 0.0,
        )
        if self.episode.done and not obs.tool_results:
            obs = Observation(messages=())
        return obs, reward, done, truncated, info

    def _tool_step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        """An MCP env's step: the action's tool calls through the executor."""
        if not action.tool_calls and not action.tool_call_errors:
            text = "This environment acts through tool calls only: call one of its tools."
            return Observation(messages=(Message("user", text),)), 0.0, False, {"tool_calls": 0}
        assert self.executor is not None  # set by reset
        self._turn_reward, self._turn_done, self._turn_obs = 0.0, False, []
        report = self.executor.execute(
            action.tool_calls,
            action.tool_call_errors,
            trajectory_id=self.episode.trajectory_id,
            turn=self.episode.turn,
        )
        obs = Observation(
            messages=tuple(Message("tool", r.content) for r in report.results),
            tool_results=report.results,
            risk_events=report.risk_events,
        )
        info = {
            "tool_calls": len(report.results),
            "tool_errors": sum(not r.ok for r in report.results),
            "openenv_calls": _json_safe(self._turn_obs),
        }
        return obs, self._turn_reward, self._turn_done, info

    def normalise(self, reward: float) -> float:
        """``reward`` mapped from ``reward_range`` to [0, 1], clipped. Never raises."""
        low, high = self.reward_range
        return min(1.0, max(0.0, (reward - low) / (high - low)))

    def oracle_reply(self) -> str | None:
        """The registered oracle's reply to the current observation (None: none registered)."""
        oracle = _ORACLES.get(self.module)
        if oracle is None or self._obs is None or self.episode.done:
            return None
        return oracle(self._obs)

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components in the module docstring)."""
        return Rubric(
            [
                RewardFunction("openenv_outcome", RewardGroup.OUTCOME, openenv_outcome),
                RewardFunction("openenv_return", RewardGroup.OUTCOME, openenv_return, weight=0.0),
                token_cost(),
            ],
            weights,
        )

    def close(self) -> None:
        """Close the client and stop the server (safe to call twice)."""
        self._finalizer()


def _json_safe(value: Any) -> Any:
    """``value`` as JSON values (unknown types as their ``str``); the trajectory store writes info."""
    return json.loads(json.dumps(value, default=str))


def openenv_outcome(trajectory: Trajectory) -> float:
    """OpenEnv's final reward normalised to [0, 1] (``info["openenv_outcome"]``); 0 without an end."""
    if trajectory.turns and trajectory.terminated:
        return float(trajectory.turns[-1].info.get("openenv_outcome", 0.0))
    return 0.0


def openenv_return(trajectory: Trajectory) -> float:
    """Σ of OpenEnv's per-step rewards (``Turn.reward``), a logged metric."""
    return float(sum(t.reward for t in trajectory.turns))


def openenv_modules() -> list[str]:
    """Modules with a registered oracle plus installed ``openenv-*`` distributions, sorted."""
    from importlib import metadata

    found = set(_ORACLES)
    for dist in metadata.distributions():
        name = str(dist.metadata["Name"] or "")
        if name.startswith("openenv-") and name != "openenv-core":
            found.add(name[len("openenv-") :].replace("-", "_"))
    return sorted(found)


def resolve_openenv_id(env_id: str) -> EnvSpec:
    """The registry entry (factory, description, recipe) of an ``openenv/<module>-v0`` id; the factory takes the
    keywords of :class:`OpenEnvEnv` after ``module``.

    Raises:
        EnvUnavailableError: ``openenv-core`` is not installed (names the extra).
        UnknownEnvError: the id is not of the form ``openenv/<module>-v0``.
    """
    match = _OPENENV_ID.match(env_id)
    if match is None or match.group(2) != "0":
        raise UnknownEnvError(
            f"unknown env id {env_id!r}: ids of this family look like {OPENENV_PATTERN}, with "
            "an importable OpenEnv env package (its server.app:app is served)"
        )
    _require_openenv()
    module = match.group(1)

    def factory(
        max_turns: int = 5, context: EnvContext = EnvContext(), **kwargs: Any
    ) -> OpenEnvEnv:
        return OpenEnvEnv(module, max_turns=max_turns, context=context, **kwargs)

    overrides = dict(OPENENV_RECIPE)
    if module not in _ORACLES:  # no demonstrations and no guidance without an oracle
        overrides.update({"warmup.enabled": False, "sampling.guidance": "off"})
    return EnvSpec(
        env_id, factory, f"OpenEnv env {module} (served locally)", recipe_overrides=overrides
    )
