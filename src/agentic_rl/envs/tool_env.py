"""``ToolEnv``: the episode protocol every tool env shares, so a new env is its task, tools, rubric and oracle.

A tool env subclasses :class:`ToolEnv`, wires its tools in ``__init__`` and fills in hooks; the
base's ``reset`` and ``step`` run the protocol::

    class MyEnv(ToolEnv):
        def __init__(self, context: EnvContext = EnvContext()):
            self.setup_tools({t.name: t for t in MY_TOOLS}, INSTRUCTIONS,
                             PermissionPolicy.allow_all({"my_tool": "read_only"}), context=context)

        def new_task(self, seed):                  # the task hook: keep the task, return its text
            self.task = make_task(seed)
            return self.task.question

        def grade_answer(self, text):              # the final reply: (step reward, info)
            correct = extract_answer(text) == self.task.answer
            return float(correct), {"correct": correct}

        def oracle_turn(self): ...                 # the scripted reference policy's next reply
        def rubric(self, weights=RewardWeights()): ...

``reset(seed, options)`` is :meth:`~agentic_rl.envs.base.Env.start_episode` (seed, turn 0,
trajectory id), :meth:`ToolEnv.new_task` and the first observation (system prompt with the
tool schemas, the task as a user message), with :meth:`ToolEnv.task_info` as its info.
``step(action)`` is :meth:`~agentic_rl.envs.base.Env.begin_step` (the guards:
:class:`~agentic_rl.envs.base.EpisodeNotStartedError` before ``reset``,
:class:`~agentic_rl.envs.base.EpisodeEndedError` after the end; then the turn count), then either
a tool turn (the action has tool calls or unparsable ones: :meth:`ToolEnv.tool_step` runs them,
reward 0, truncated when :attr:`ToolEnv.max_turns` is reached) or the final reply
(:meth:`~agentic_rl.envs.base.Env.end_episode`, then :meth:`ToolEnv.grade_answer`; terminated).
An env with another protocol overrides ``reset``/``step`` and calls the same episode hooks.

What the base holds: the episode bookkeeping of :class:`~agentic_rl.envs.base.Env` (read-only
``episode``: turn, done, started, trajectory id), the
:class:`~agentic_rl.tools.governance.executor.ToolExecutor` wiring (permission policy, audit
log), the system prompt with the tool schemas
(:func:`~agentic_rl.tools.definition.prompt.render_tool_system_prompt`, because the default
model's chat template ignores tools) and the typed step result of a tool turn (tool results
and risk events on the :class:`~agentic_rl.types.Observation`, ``info["tool_calls"]`` and
``info["tool_errors"]``).

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.envs.context import EnvContext
from agentic_rl.tools.definition.prompt import render_tool_system_prompt
from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ExecutionReport, ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy, ToolPermission
from agentic_rl.tools.mcp.tools import McpTools
from agentic_rl.types import Action, Message, Observation, RiskEvent, ToolResult

StepResult = tuple[Observation, float, bool, bool, dict[str, Any]]

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
    _offered: tuple[dict[str, Any], ...] = ()
    mcp: McpTools | None = None
    #: the most turns an episode may take: the tool turn that reaches it is truncated (None:
    #: no limit of the env's own; the rollout engine's budgets still apply)
    max_turns: int | None = None

    def setup_tools(
        self,
        tools: Mapping[str, Tool],
        instructions: str,
        default_policy: PermissionPolicy | Mapping[str, str],
        permissions: dict[str, Any] | None = None,
        audit_path: str | None = None,
        run_id: str = "",
        offered: Iterable[str] | None = None,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        tool_prompt: str = "json",
        *,
        context: EnvContext | None = None,
    ) -> None:
        """Wire ``tools`` to an executor and render the system prompt.

        Args:
            tools: ``{name: Tool}``; kept as ``self.tools`` (used as given by the executor).
            instructions: the text before the tool schemas in the system prompt.
            default_policy: the permission policy when ``permissions`` is None; a mapping
                ``{tool name: side-effect class}`` is
                :meth:`~agentic_rl.tools.governance.permissions.PermissionPolicy.allow_all` of it
                (those tools allowed, any other denied).
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
            context: the run's :class:`~agentic_rl.envs.context.EnvContext`; when given, its
                ``permissions``, ``audit_path`` and ``run_id`` are used in place of the three
                arguments of those names.

        Raises:
            ValueError: a wrong ``permissions`` key or value (named), a ``permissions`` rule
                for a tool that is not in ``tools`` or the MCP servers' tools
                (:meth:`~agentic_rl.tools.governance.permissions.PermissionPolicy.check_tool_names`),
                or an unknown ``tool_prompt``.
            KeyError: an ``offered`` name is not in ``tools``.
            McpServerError: an MCP server could not start to list its tools (see
                :class:`~agentic_rl.tools.mcp.McpTools`, also for its ValueErrors).
        """
        if context is not None:
            permissions, audit_path, run_id = (
                context.permissions,
                context.audit_path,
                context.run_id,
            )
        if not isinstance(default_policy, PermissionPolicy):
            default_policy = PermissionPolicy.allow_all(dict(default_policy))
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

    def start_episode(self, seed: int | None, options: dict[str, Any] | None = None) -> int:
        """:meth:`~agentic_rl.envs.base.Env.start_episode`, after stopping the MCP servers of a
        previous episode cut short (truncated). Returns the episode's seed.

        Raises:
            gymnasium.error.Error: ``seed`` is negative or not an integer.
        """
        if self.mcp is not None:
            self.mcp.end_episode()  # a previous episode cut short (truncated) ends here
        return super().start_episode(seed, options)

    def first_observation(self, task_text: str) -> Observation:
        """The reset observation: the system prompt, the task as a user message, a copy of the
        tool schemas (each observation owns its data, as Gymnasium requires: a caller editing
        one never changes what the env offers next)."""
        return Observation(
            messages=(Message("system", self.system_prompt), Message("user", task_text)),
            tools=copy.deepcopy(self.tool_schemas),
        )

    def end_episode(self) -> None:
        """Mark the episode ended (a later ``step`` raises
        :class:`~agentic_rl.envs.base.EpisodeEndedError`) and stop its MCP servers."""
        super().end_episode()
        if self.mcp is not None:
            self.mcp.end_episode()

    def offer_tools(self, schemas: Iterable[dict[str, Any]]) -> None:
        """Set the tool schemas the first observation offers (for an env whose tools run
        outside :meth:`setup_tools`' executor, e.g. in a sandbox). Never raises."""
        self._offered = tuple(schemas)

    # -- the protocol: reset and step call the hooks below -----------------------------------

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start the episode of ``seed`` (drawn from ``np_random`` if None): the task of
        :meth:`new_task`, offered with the tools; ``options["trajectory_id"]`` names the episode
        in the audit log. Returns the first observation and :meth:`task_info`.

        Raises:
            gymnasium.error.Error: ``seed`` is negative or not an integer.
            NotImplementedError: the env implements neither :meth:`new_task` nor ``reset``.
        """
        seed = self.start_episode(seed, options)
        return self.first_observation(self.new_task(seed)), self.task_info()

    def step(self, action: Action) -> StepResult:
        """One turn (module docstring): a tool turn (reward 0; truncated when :attr:`max_turns`
        is reached) or the final reply graded by :meth:`grade_answer` (terminated).

        Raises:
            EpisodeNotStartedError: ``reset`` was never called.
            EpisodeEndedError: the episode already ended.
            NotImplementedError: the env implements neither :meth:`grade_answer` nor ``step``.
        """
        turn = self.begin_step()
        if action.tool_calls or action.tool_call_errors:
            obs, info = self.tool_step(action)
            truncated = self.max_turns is not None and turn >= self.max_turns
            if truncated:
                self.end_episode()
            return obs, 0.0, False, truncated, info
        self.end_episode()
        reward, info = self.grade_answer(action.text)
        return Observation(messages=()), float(reward), True, False, info

    def new_task(self, seed: int) -> str:
        """Task hook of :meth:`reset`: draw the task of ``seed`` (keep what grading needs on
        ``self``) and return its text, the episode's first user message.

        Raises:
            NotImplementedError: this default (an env implements it, or its own ``reset``).
        """
        raise NotImplementedError(
            f"{type(self).__name__} implements neither new_task() nor reset()"
        )

    def task_info(self) -> dict[str, Any]:
        """Info hook of :meth:`reset`: the reset info of the task just drawn ({} by default)."""
        return {}

    def tool_step(self, action: Action) -> tuple[Observation, dict[str, Any]]:
        """Tool-turn hook of :meth:`step`: run the action's calls (:meth:`run_tools`) and return
        the observation and info of :meth:`tool_turn`. Envs extend it to add info or risk
        events. Raises what :meth:`run_tools` raises."""
        report = self.run_tools(action)
        return self.tool_turn(report.results, report.risk_events)

    def oracle_reply(self) -> str | None:
        """The reference policy's reply: None before ``reset`` and after the end, else
        :meth:`oracle_turn`. Never raises (unless the hook does)."""
        if not self.episode.started or self.episode.done:
            return None
        return self.oracle_turn()

    def oracle_turn(self) -> str | None:
        """Oracle hook of :meth:`oracle_reply`: the scripted reference policy's next reply in a
        started, unfinished episode (``episode.turn`` turns done so far); None: no oracle (this
        default). Used for warm-up demonstrations, guidance and ``check-env``."""
        return None

    def grade_answer(self, text: str) -> tuple[float, dict[str, Any]]:
        """Grading hook of :meth:`step`: the final reply's step reward and info (the rubric's
        components read the info; the episode has already ended).

        Raises:
            NotImplementedError: this default (an env implements it, or its own ``step``).
        """
        raise NotImplementedError(
            f"{type(self).__name__} implements neither grade_answer() nor step()"
        )

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
            trajectory_id=self.episode.trajectory_id,
            turn=self.episode.turn - 1,
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
