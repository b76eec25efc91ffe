"""``ToolEnv``: the episode bookkeeping every tool env shares, so a new env is its task, tools and rubric.

A tool env subclasses :class:`ToolEnv` and calls, in this order::

    class MyEnv(ToolEnv):
        def __init__(self, permissions=None, audit_path=None, run_id=""):
            self.setup_tools({t.name: t for t in MY_TOOLS}, INSTRUCTIONS,
                             PermissionPolicy.allow_all({"my_tool": "read_only"}),
                             permissions, audit_path, run_id)

        def reset(self, seed=None, options=None):
            seed = self.start_episode(seed, options)      # drawn from np_random if None
            self.task = make_task(seed)
            return self.first_observation(self.task.question), {"level": ...}

        def step(self, action):
            self.begin_step(self.task is not None)        # the guards, then turn += 1
            if action.tool_calls or action.tool_call_errors:
                obs, info = self.tool_turn(self.run_tools(action))
                return obs, 0.0, False, False, info
            self.end_episode()
            ...grade the final answer...

What the base holds: the episode guards (:class:`~agentic_rl.envs.base.EpisodeNotStartedError`
before ``reset``, :class:`~agentic_rl.envs.base.EpisodeEndedError` after the end), seed drawing,
the turn counter (``_turn``: turns stepped so far in the episode), the end flag (``_done``), the
episode's id in the audit log (``_trajectory_id``, from ``options["trajectory_id"]``), the
:class:`~agentic_rl.tools.governance.executor.ToolExecutor` wiring (permission policy, audit
log), the system prompt with the tool schemas
(:func:`~agentic_rl.tools.definition.prompt.render_tool_system_prompt`, because the default
model's chat template ignores tools) and the typed step result of a tool turn (tool results
and risk events on the :class:`~agentic_rl.types.Observation`, ``info["tool_calls"]`` and
``info["tool_errors"]`` as the shared reward components of
:mod:`agentic_rl.rewards.components` read them).

MCP tools: ``setup_tools(..., mcp_servers=[...])`` adds the tools of MCP servers
(:mod:`agentic_rl.tools.mcp`; an env exposes this as its ``mcp_servers`` argument, so
``[env.kwargs] mcp_servers = [...]`` configures it) to the env's own, offered after them, run by the
same executor (permission policy, audit log, risk events). The default policy gives each the
permission class its spec or MCP annotations imply. Servers are per episode: a server starts on
the episode's first call to one of its tools and stops at :meth:`ToolEnv.end_episode`, at the next
:meth:`ToolEnv.start_episode` and at :meth:`ToolEnv.close`; env snapshots do not hold a server's
state.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentic_rl.envs.base import Env, EpisodeEndedError, EpisodeNotStartedError
from agentic_rl.tools.definition.prompt import render_tool_system_prompt
from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ExecutionReport, ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy, ToolPermission
from agentic_rl.tools.mcp.tools import McpTools
from agentic_rl.types import Action, Message, Observation, RiskEvent, ToolResult

__all__ = ["ToolEnv"]


class ToolEnv(Env):
    """Base of the tool envs (see the module docstring): guards, turns, executor, prompt.

    Attributes:
        tools: ``{name: Tool}`` offered to the policy (set by :meth:`setup_tools`).
        executor: runs every tool call (permission check, audit, observation).
        system_prompt: instructions followed by the tool schemas.
    """

    tools: dict[str, Tool]
    executor: ToolExecutor | None = None
    system_prompt: str = ""
    _done: bool = False
    _turn: int = 0
    _trajectory_id: str = ""
    _offered: tuple[dict[str, Any], ...] = ()
    mcp: McpTools | None = None

    def setup_tools(
        self,
        tools: Mapping[str, Tool],
        instructions: str,
        default_policy: PermissionPolicy,
        permissions: dict[str, Any] | None = None,
        audit_path: str | None = None,
        run_id: str = "",
        offered: Iterable[str] | None = None,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        tool_prompt: str = "json",
    ) -> None:
        """Wire ``tools`` to an executor and render the system prompt.

        Args:
            tools: ``{name: Tool}``; kept as ``self.tools`` (used as given by the executor).
            instructions: the text before the tool schemas in the system prompt.
            default_policy: the permission policy when ``permissions`` is None.
            permissions: a ``[tools.permissions]`` table (see
                :meth:`~agentic_rl.tools.governance.permissions.PermissionPolicy.from_dict`).
            audit_path: JSON-lines audit log of every tool call; None audits nothing.
            run_id: written into every audit record.
            offered: names of the tools the policy is told about (prompt and first
                observation), in order; None offers every tool. The others are still known to
                the executor (a call to one is decided by the permission policy, not unknown).
            mcp_servers: ``mcp_servers`` tables or :class:`~agentic_rl.tools.mcp.McpServerSpec`
                values whose tools are added (and offered) after ``tools``; their permission
                classes extend ``default_policy`` (a ``permissions`` table replaces both).
            tool_prompt: how the system prompt lists the tools: ``"json"`` (each schema) or
                ``"signature"`` (typed signatures, about a third of the tokens; see
                :mod:`agentic_rl.tools.definition.prompt`). The observation's ``tools`` always
                carry the full schemas.

        Raises:
            ValueError: a wrong ``permissions`` key or value (named), a ``permissions`` rule
                for a tool that is not in ``tools`` or the MCP servers' tools
                (:meth:`~agentic_rl.tools.governance.permissions.PermissionPolicy.check_tool_names`),
                or an unknown ``tool_prompt``.
            KeyError: an ``offered`` name is not in ``tools``.
            McpServerError: an MCP server could not start to list its tools (see
                :class:`~agentic_rl.tools.mcp.McpTools`, also for its ValueErrors).
        """
        self.tools = dict(tools)
        names = list(self.tools) if offered is None else list(offered)
        if mcp_servers:
            default_policy = self._add_mcp_tools(McpTools(mcp_servers), default_policy, names)
        self._offered = tuple(self.tools[n].schema() for n in names)
        policy = default_policy if permissions is None else PermissionPolicy.from_dict(permissions)
        if permissions is not None:  # a user's rule for a tool this env lacks would never apply
            policy.check_tool_names(self.tools)
        audit = AuditLog(audit_path) if audit_path else None
        self.executor = ToolExecutor(self.tools, policy, audit, {"run_id": run_id})
        self.system_prompt = render_tool_system_prompt(
            instructions, list(self._offered), tool_prompt
        )

    def _add_mcp_tools(
        self, mcp: McpTools, policy: PermissionPolicy, names: list[str]
    ) -> PermissionPolicy:
        """Add ``mcp``'s tools to ``self.tools`` and ``names``; ``policy`` with their classes."""
        clash = sorted(set(self.tools) & set(mcp.tools))
        if clash:
            mcp.close()
            raise ValueError(f"MCP tools {clash} clash with the env's tools: set a prefix")
        self.mcp = mcp
        self.tools.update(mcp.tools)
        names.extend(mcp.tools)
        listed = dict(policy.tools)
        added = tuple(
            (name, ToolPermission(side_effect=cls))
            for name, cls in mcp.side_effects.items()
            if name not in listed
        )
        return dataclasses.replace(policy, tools=policy.tools + added)

    @property
    def tool_schemas(self) -> tuple[dict[str, Any], ...]:
        """JSON schemas of the offered tools, in order (what the first observation offers)."""
        return self._offered

    def start_episode(self, seed: int | None, options: dict[str, Any] | None) -> int:
        """Begin an episode: not done, no turn yet, named ``options["trajectory_id"]`` (a random
        id without one). Returns the episode's seed (:meth:`~agentic_rl.envs.base.Env.episode_seed`:
        ``seed``, or one drawn from ``np_random``).

        Raises:
            gymnasium.error.Error: ``seed`` is negative or not an integer.
        """
        seed = self.episode_seed(seed)
        if self.mcp is not None:
            self.mcp.end_episode()  # a previous episode cut short (truncated) ends here
        self._done, self._turn = False, 0
        self._trajectory_id = str((options or {}).get("trajectory_id") or uuid.uuid4().hex)
        return seed

    def first_observation(self, task_text: str) -> Observation:
        """The reset observation: the system prompt, the task as a user message, a copy of the
        tool schemas (each observation owns its data, as Gymnasium requires: a caller editing
        one never changes what the env offers next)."""
        return Observation(
            messages=(Message("system", self.system_prompt), Message("user", task_text)),
            tools=copy.deepcopy(self.tool_schemas),
        )

    def begin_step(self, started: bool) -> None:
        """The guards of ``step``, then count the turn.

        Args:
            started: whether ``reset`` has drawn a task.

        Raises:
            EpisodeNotStartedError: ``started`` is False.
            EpisodeEndedError: the episode already ended.
        """
        if not started:
            raise EpisodeNotStartedError("step() called before reset()")
        if self._done:
            raise EpisodeEndedError("step() called after the episode ended; call reset() first")
        self._turn += 1

    def end_episode(self) -> None:
        """Mark the episode ended (a later ``step`` raises :class:`EpisodeEndedError`)."""
        self._done = True
        if self.mcp is not None:
            self.mcp.end_episode()

    def close(self) -> None:
        """Stop the episode's MCP servers, if any (see the module docstring). Idempotent;
        never raises."""
        if self.mcp is not None:
            self.mcp.close()

    def run_tools(self, action: Action) -> ExecutionReport:
        """Run the action's tool calls and parser errors through the executor, as this turn's.

        Raises:
            RuntimeError: :meth:`setup_tools` was never called.
        """
        if self.executor is None:
            raise RuntimeError(f"{type(self).__name__}: setup_tools() was not called")
        return self.executor.execute(
            action.tool_calls,
            action.tool_call_errors,
            trajectory_id=self._trajectory_id,
            turn=self._turn - 1,
        )

    @staticmethod
    def tool_turn(
        results: tuple[ToolResult, ...],
        risk_events: Iterable[RiskEvent] = (),
        **info: Any,
    ) -> tuple[Observation, dict[str, Any]]:
        """The observation and info of a tool turn: one ``tool`` message per result, the typed
        results and risk events, and ``info`` with ``tool_calls``/``tool_errors`` first, then
        ``info``'s own keys. Never raises."""
        obs = Observation(
            messages=tuple(Message("tool", r.content) for r in results),
            tool_results=tuple(results),
            risk_events=tuple(risk_events),
        )
        return obs, {
            "tool_calls": len(results),
            "tool_errors": sum(not r.ok for r in results),
            **info,
        }
