"""``calculator-v0``: arithmetic questions solved with a calculator tool.

Task
    A seeded arithmetic question (see :mod:`agentic_rl.envs.calculator.tasks` for the three
    difficulty levels ``direct``, ``multi_op``, ``word``); the seed fixes the task, and
    ``levels[seed % len(levels)]`` its level.
Observation
    On reset: a system message with the instructions and the tool schema (rendered by
    :func:`agentic_rl.tools.definition.prompt.render_tool_system_prompt`, because the default model's chat
    template ignores tools) and a user message with the question. After a tool turn: one
    ``tool`` message per call with its result or error.
Actions
    A reply containing ``<tool_call>{"name": "calculator", "arguments": {"expression": "…"}}
    </tool_call>`` blocks (any number, any number of turns), or a final reply containing
    ``<answer>NUMBER</answer>``. A reply with no tool call is final.
Tools
    ``calculator(expression)`` — arithmetic only, evaluated by an AST walker, never ``eval``;
    plus the tools of the ``mcp_servers`` given, if any (:mod:`agentic_rl.tools.mcp`: one server
    session per episode, calls through the same executor; :mod:`agentic_rl.envs.tool_env`).
Reward (rubric)
    outcome ``correct_answer`` (1 if the single answer tag equals the reference answer);
    process ``computed_calls`` (fraction of the episode's tool calls that parsed, ran without
    error *and computed something*: an expression with an operator, not a bare number; 0 if
    none) and ``grounded_answer`` (1 if the final reply has exactly one numeric answer tag and
    that answer is correct or equals the result of one of the episode's computing calls).
    Neither can be farmed: a trivial call on a bare number followed by any answer earns 0
    process credit, below an honest attempt that computed a wrong expression and answered its
    result (0.2 with the default λ_p = 0.1), and the whole process credit (at most 2 × λ_p)
    stays below any difference in the outcome (λ_o = 1); cost ``tool_calls`` (0.02 per call)
    and ``generated_tokens`` (0.0005 per sampled token); risk ``denied_calls`` (0.5), ``sandbox_limit_hits`` (0.1),
    ``outside_workspace_attempts`` (0.5), counted from ``Turn.risk_events`` (always 0 with
    the default policy: the calculator is read-only and allowed).
    ``step`` itself returns the outcome (1.0/0.0) on the final step and 0 before.
Termination
    terminated = a final reply was given. This env never truncates; turn and token budgets
    are the rollout engine's.
Tool execution
    Every call goes through :class:`~agentic_rl.tools.governance.executor.ToolExecutor`: permission check
    (default: ``calculator`` allowed as ``read_only``, anything else denied; or the
    ``permissions`` dict, a ``[tools.permissions]`` table), execution, audit record (when
    ``audit_path`` is set), observation. ``reset(options={"trajectory_id": ...})`` names the
    episode in the audit log (else a random id).
Snapshots
    ``snapshot()`` returns a :class:`CalculatorSnapshot` (task, turn count, whether the
    calculator was called, episode ended, trajectory id); ``restore`` puts all of it back. The
    calculator is stateless and side-effect free, so nothing else exists to restore (audit
    records already written stay written).
Difficulty knobs
    ``levels`` (which levels, in order), e.g. ``levels=("direct",)`` for the warm-up.
Known failure modes
    Several answer tags score 0; a number written in words scores 0; the model can put the
    final answer in the same reply as a tool call, which then counts as a tool turn.
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from typing import Any

from agentic_rl.envs.base import EpisodeState
from agentic_rl.envs.calculator.tasks import LEVELS, ArithmeticTask, make_task
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.rewards import (
    RewardFunction,
    RewardGroup,
    RewardWeights,
    Rubric,
    extract_answer,
    numbers_equal,
    parse_number,
)
from agentic_rl.rewards.components import (
    answer_format,
    correct_answer,
    final_info,
    generated_tokens,
    num_tool_calls,
    tool_call_format,
)
from agentic_rl.rewards.costs import token_cost, tool_call_cost
from agentic_rl.rewards.risk import risk_functions
from agentic_rl.tools import calculator
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import Action, Observation, Trajectory

__all__ = [
    "CalculatorEnv",
    "CalculatorSnapshot",
    "INSTRUCTIONS",
    "answer_format",
    "computed_calls",
    "correct_answer",
    "generated_tokens",
    "grounded_answer",
    "num_tool_calls",
    "tool_call_format",
]

INSTRUCTIONS = (
    "You are a helpful assistant. Use the calculator tool for arithmetic. "
    "When you know the result, reply with <answer>NUMBER</answer>."
)


@dataclasses.dataclass(frozen=True)
class CalculatorSnapshot:
    """The whole episode state of a :class:`CalculatorEnv` (an immutable value)."""

    task: ArithmeticTask | None
    done: bool
    turn: int
    called: bool
    trajectory_id: str


class CalculatorEnv(ToolEnv):
    """Arithmetic with a calculator tool (see the module docstring).

    Args:
        levels: difficulty levels to draw from (subset of ``direct``, ``multi_op``, ``word``).
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table; None allows ``calculator``
            (read-only) only.
        mcp_servers: MCP servers whose tools are offered next to the calculator (tables of
            :class:`~agentic_rl.tools.mcp.McpServerSpec`; needs the ``mcp`` extra).

    Raises:
        ValueError: an unknown level, or a wrong ``permissions`` key or value (named), or a bad
            ``mcp_servers`` entry.
        McpServerError: an MCP server could not start to list its tools.
    """

    description = (
        "Arithmetic questions (direct, multi-op, word problems) solved with a calculator tool"
    )

    def __init__(
        self,
        levels: tuple[str, ...] | list[str] = LEVELS,
        context: EnvContext = EnvContext(),
        mcp_servers: list[dict[str, Any]] | None = None,
    ):
        self.levels = levels if isinstance(levels, str) else tuple(levels)
        make_task(0, self.levels)  # validate levels now (a bare string is rejected there)
        self.setup_tools(
            {calculator.name: calculator},
            INSTRUCTIONS,
            PermissionPolicy.allow_all({calculator.name: "read_only"}),
            mcp_servers=mcp_servers,
            context=context,
        )
        self.task: ArithmeticTask | None = None
        self._called = False

    def new_task(self, seed: int) -> str:
        """Draw the task of ``seed``; returns its question."""
        self.task = make_task(seed, self.levels)
        self._called = False
        return self.task.question

    def task_info(self) -> dict[str, Any]:
        """The reset info: the task's level, answer and expression."""
        assert self.task is not None
        return {
            "level": self.task.level,
            "expected": self.task.answer,
            "expression": self.task.expression,
        }

    def tool_step(self, action: Action) -> tuple[Observation, dict[str, Any]]:
        """Run the action's tool calls (and remember the calculator was called)."""
        report = self.run_tools(action)
        self._called = True
        return self.tool_turn(report.results, report.risk_events)

    def grade_answer(self, text: str) -> tuple[float, dict[str, Any]]:
        """Grade the final answer: 1.0 when it equals the reference (module docstring)."""
        assert self.task is not None
        answer = extract_answer(text)
        correct = numbers_equal(answer, self.task.answer)
        info = {
            "answer": answer,
            "correct": correct,
            "answer_format_ok": answer is not None and parse_number(answer) is not None,
            "level": self.task.level,
            "expected": self.task.answer,
        }
        return float(correct), info

    def snapshot(self) -> CalculatorSnapshot:
        """The episode state (see the module docstring). Never raises."""
        episode = self.episode
        return CalculatorSnapshot(
            self.task, episode.done, episode.turn, self._called, episode.trajectory_id
        )

    def restore(self, snapshot: CalculatorSnapshot) -> None:
        """Bring the episode back to ``snapshot`` (from any CalculatorEnv).

        Raises:
            TypeError: ``snapshot`` is not a :class:`CalculatorSnapshot`.
        """
        if not isinstance(snapshot, CalculatorSnapshot):
            raise TypeError(
                f"{self.env_id or 'calculator-v0'}: expected a CalculatorSnapshot, "
                f"got {type(snapshot).__name__}"
            )
        self.task, self._called = snapshot.task, snapshot.called
        self.restore_episode(
            EpisodeState(
                snapshot.task is not None, snapshot.turn, snapshot.done, snapshot.trajectory_id
            )
        )

    def oracle_reply(self) -> str | None:
        """Reference policy: call the calculator on the reference expression, then answer."""
        if self.task is None or self.episode.done:
            return None
        if not self._called:
            call = {"name": "calculator", "arguments": {"expression": self.task.expression}}
            return f"<tool_call>{json.dumps(call)}</tool_call>"
        return f"<answer>{self.task.answer}</answer>"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric of the env (components listed in the module docstring)."""
        return Rubric(
            [
                RewardFunction("correct_answer", RewardGroup.OUTCOME, correct_answer),
                RewardFunction("computed_calls", RewardGroup.PROCESS, computed_calls),
                RewardFunction("grounded_answer", RewardGroup.PROCESS, grounded_answer),
                tool_call_cost(),
                token_cost(),
                *risk_functions(),
            ],
            weights,
        )


def _computed_results(trajectory: Trajectory) -> tuple[int, list[Fraction]]:
    """(number of calls, results of the calls that ran and computed something), in call order."""
    calls = 0
    results: list[str] = []
    for turn in trajectory.turns:
        by_id = {c.id: c for c in turn.action.tool_calls}
        calls += len(turn.tool_results)
        for result in turn.tool_results:
            call = by_id.get(result.call_id)
            expression = call.arguments.get("expression") if call is not None else None
            value = parse_number(result.content.strip()) if result.ok else None
            if (
                value is not None
                and isinstance(expression, str)
                and parse_number(expression.strip()) is None
            ):
                results.append(value)
    return calls, results


def computed_calls(trajectory: Trajectory) -> float:
    """Fraction of the episode's tool calls (accepted + rejected) that ran without error and
    computed something (their expression is not a bare number); 0 if there were none."""
    calls, results = _computed_results(trajectory)
    return len(results) / calls if calls else 0.0


def grounded_answer(trajectory: Trajectory) -> float:
    """1.0 if the final reply had exactly one numeric ``<answer>`` tag and the answer is correct
    or equals the result of one of the episode's computing calls, else 0.0."""
    info = final_info(trajectory)
    if not info.get("answer_format_ok"):
        return 0.0
    if info.get("correct"):
        return 1.0
    _, results = _computed_results(trajectory)
    return 1.0 if any(numbers_equal(info.get("answer"), r) for r in results) else 0.0
