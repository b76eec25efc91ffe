"""Any `reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ task as an env: ``rg/<task>-v0``.

reasoning-gym (pinned 0.1.25) ships 100+ seeded procedural task generators, each with its own
verifier (``score_answer``), offline. ``make("rg/countdown-v0")`` builds a
:class:`ReasoningGymEnv` for that task; ids are resolved on demand (the package is imported on
first use, not when :mod:`agentic_rl.envs` is imported), and ``agentic-rl envs`` lists the family
in one entry.

Task
    ``reasoning_gym.create_dataset(task, size=1, seed=seed, **settings)[0]``: the seed fixes
    the task. With several tasks (``tasks=(...)``), ``tasks[seed % len(tasks)]`` is used.
Observation
    On reset: a system message (instructions; the tool schema when the python tool is on) and
    a user message with the generator's question. After a tool turn: one ``tool`` message per
    call.
Actions
    A final reply with exactly one ``<answer>…</answer>`` tag, or (python tool on) replies with
    ``<tool_call>{"name": "python", "arguments": {"code": "…"}}</tool_call>`` blocks first. A
    reply with no tool call is final.
Tools
    Optional (``python_tool=True``): the sandboxed stateful ``python`` tool of
    :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox`, through
    :class:`~agentic_rl.tools.sandbox.env_tools.SandboxedTools` (permission policy, audit, risk
    detectors). Off by default for ``rg/*`` ids.
Reward (rubric)
    outcome ``correct_answer`` (1 if the task's ``score_answer`` gives 1 to the single answer;
    partial credit does not count), ``task_score`` (the raw ``score_answer`` value, weight 0:
    logged only) and ``verifier_errors`` (1 when the answer verifier itself failed, weight 0);
    process ``answer_format`` (exactly one answer tag) and ``tool_call_format``;
    cost ``tool_calls`` (0.02) and ``generated_tokens`` (0.0005); risk: the three built-in
    components of :mod:`agentic_rl.rewards.risk`.
Difficulty knobs
    Every field of the task's reasoning-gym config (e.g. ``min_numbers``, ``max_target`` of
    ``countdown``) is a keyword argument of ``make``: ``make("rg/countdown-v0", max_numbers=4)``;
    an unknown one is a ``ValueError`` naming the known fields.
Snapshots
    ``snapshot()``/``restore()`` save and bring back the task, the turn count, the flags and,
    with the python tool, the sandbox: workspace files plus the interpreter rebuilt by replaying
    the episode's python calls (:mod:`agentic_rl.tools.sandbox.snapshot` says what is not restored).
Oracle
    Answers with the generator's gold answer (no tool call).
Known failure modes
    ``check_env`` over every task (2 seeds each, reasoning-gym 0.1.25): 99 of 106 pass. Tasks
    whose generator has no gold answer (``boxnet``, ``graph_color``, ``propositional_logic``,
    ``rubiks_cube``, ``rush_hour``) have no oracle, so warm-up and the oracle check fail;
    ``composite`` needs a ``datasets`` setting; ``list_functions`` is not reproducible (the same
    seed gives different tasks), so GRPO groups on it do not share their task. Several answer
    tags score 0; an answer cut by the token budget scores 0.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from agentic_rl.envs.base import EpisodeState
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.registry import EnvSpec
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.errors import UnknownEnvError
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric, extract_answer
from agentic_rl.rewards.components import (
    answer_format,
    correct_answer,
    tool_call_format,
)
from agentic_rl.rewards.costs import token_cost, tool_call_cost
from agentic_rl.rewards.risk import risk_functions
from agentic_rl.tools.definition.prompt import render_tool_system_prompt
from agentic_rl.types import Action, Observation, Trajectory

__all__ = [
    "ReasoningGymEnv",
    "Grade",
    "RGTask",
    "rg_task_names",
    "make_rg_task",
    "resolve_rg_id",
    "RG_PATTERN",
]

RG_PATTERN = "rg/<task>-v0"
_RG_ID = re.compile(r"^rg/([A-Za-z0-9_]+)-v(\d+)$")
INSTRUCTIONS = (
    "You are a helpful assistant. Solve the task. When you are done, give your final answer "
    "exactly once, as <answer>ANSWER</answer>."
)
TOOL_INSTRUCTIONS = (
    "You are a helpful assistant. Solve the task; you can run Python with the python tool "
    "(variables persist between calls). When you are done, give your final answer exactly "
    "once, as <answer>ANSWER</answer>."
)


def rg_task_names() -> list[str]:
    """Names of every reasoning-gym task, sorted (imports reasoning-gym, ~2 s the first time)."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


#: config keys the ``train --env`` shortcut sets before the user's ``--set`` (see agentic_rl.cli.main)
REASONING_GYM_RECIPE: dict[str, Any] = {
    "rollout.max_new_tokens": 128,
    "rollout.max_total_tokens": 2048,
}


@dataclasses.dataclass(frozen=True)
class RGTask:
    """One generated task: its name, question, gold answer (None when the generator has none),
    and the raw entry that the task's ``score_answer`` needs."""

    name: str
    question: str
    answer: str | None
    entry: dict[str, Any]
    score: Callable[[str | None, dict[str, Any]], float]


class Grade(NamedTuple):
    """How a final reply scored: the extracted answer, whether it is correct, the task's own
    ``score_answer`` value, whether the answer had the expected format, and why the answer
    verifier failed (None when it ran; logged as the ``verifier_errors`` metric)."""

    answer: str | None
    correct: bool
    task_score: float
    format_ok: bool
    verifier_error: str | None = None


@dataclasses.dataclass(frozen=True)
class RGSnapshot:
    """The episode state of a :class:`ReasoningGymEnv` (``sandbox``: None without the python tool)."""

    task: RGTask | None
    done: bool
    turn: int
    called: bool
    sandbox: Any


def check_settings(task: str, settings: Mapping[str, Any]) -> None:
    """Validate a task's difficulty settings against its reasoning-gym config class.

    Raises:
        ValueError: unknown task, an unknown setting (the known ones are named), or a value the
            config's own ``validate`` rejects.
    """
    from reasoning_gym.factory import DATASETS

    if task not in DATASETS:
        raise ValueError(
            f"unknown reasoning-gym task {task!r}; known: {', '.join(sorted(DATASETS))}"
        )
    config_cls = DATASETS[task][1]
    fields = {f.name for f in dataclasses.fields(config_cls)} - {"seed", "size"}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise ValueError(
            f"unknown setting(s) {unknown} of reasoning-gym task {task!r}; known: {', '.join(sorted(fields))}"
        )
    config = config_cls(**{**settings, "seed": 0, "size": 1})
    if hasattr(config, "validate"):
        try:
            config.validate()
        except AssertionError as exc:
            raise ValueError(
                f"reasoning-gym task {task!r} rejects settings {dict(settings)}: {exc}"
            ) from None


def make_rg_task(task: str, seed: int, settings: Mapping[str, Any]) -> RGTask:
    """Generate the task of ``seed`` (deterministic: same seed and settings, same task).

    Raises:
        ValueError: as :func:`check_settings` (call it first to fail early).
    """
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(task, size=1, seed=int(seed), **dict(settings))
    entry = dataset[0]
    answer = entry.get("answer")
    return RGTask(
        task,
        str(entry["question"]),
        None if answer is None else str(answer),
        entry,
        dataset.score_answer,
    )


class ReasoningGymEnv(ToolEnv):
    """reasoning-gym tasks as an env (see the module docstring).

    Args:
        tasks: one task name or several (mixed by seed).
        settings: ``{task: {setting: value}}`` difficulty settings per task.
        python_tool: offer the sandboxed stateful ``python`` tool.
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table (None: allow ``python`` only).
        sandbox_backend: ``"bwrap"`` or ``"unsafe_local"`` (see :mod:`agentic_rl.tools.sandbox.bwrap`).

    Raises:
        ValueError: an unknown task or setting (named), or no task.
    """

    description = "Any reasoning-gym task (100+ procedural generators with verifiers)"
    instructions = INSTRUCTIONS
    tool_instructions = TOOL_INSTRUCTIONS

    def __init__(
        self,
        tasks: str | Sequence[str] = "basic_arithmetic",
        settings: Mapping[str, Mapping[str, Any]] | None = None,
        python_tool: bool = False,
        context: EnvContext = EnvContext(),
        sandbox_backend: str = "bwrap",
    ):
        permissions, audit_path, run_id = context.permissions, context.audit_path, context.run_id
        self.tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
        if not self.tasks:
            raise ValueError("tasks: give at least one reasoning-gym task")
        self.settings = {t: dict((settings or {}).get(t, {})) for t in self.tasks}
        unknown = sorted(set(settings or {}) - set(self.tasks))
        if unknown:
            raise ValueError(
                f"settings given for task(s) {unknown} that are not in tasks {list(self.tasks)}"
            )
        for t in self.tasks:
            check_settings(t, self.settings[t])
        self.sandboxed = None
        schemas: tuple[dict[str, Any], ...] = ()
        if python_tool:
            from agentic_rl.tools.sandbox.bwrap import SandboxConfig
            from agentic_rl.tools.sandbox.env_tools import SandboxedTools

            self.sandboxed = SandboxedTools(
                SandboxConfig(backend=sandbox_backend),
                permissions,
                audit_path,
                run_id,
                names=("python",),
            )
            schemas = self.sandboxed.schemas()
        elif permissions is not None:
            raise ValueError("permissions apply to the python tool; set python_tool=True")
        self.offer_tools(schemas)
        self.system_prompt = (
            render_tool_system_prompt(self.tool_instructions, list(schemas))
            if schemas
            else self.instructions
        )
        self.task: RGTask | None = None
        self._called = False

    # ------------------------------------------------------------------ episode

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Generate the task of ``seed`` (random if None); ``options["trajectory_id"]`` names the
        episode in the audit log."""
        seed = self.start_episode(seed, options)
        name = self.tasks[seed % len(self.tasks)]
        self.task = make_rg_task(name, seed, self.settings[name])
        self._called = False
        if self.sandboxed is not None:
            self.sandboxed.reset((options or {}).get("trajectory_id"))
        obs = self.first_observation(self.task.question)
        return obs, {"level": name, "task": name, "expected": self.task.answer}

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the action's tool calls, or grade its final answer (see the module docstring)."""
        self.begin_step(self.task is not None)
        if action.tool_calls or action.tool_call_errors:
            return self._tool_turn(action)
        self.end_episode()
        grade = self.grade(action.text)
        info = {
            "answer": grade.answer,
            "correct": grade.correct,
            "task_score": grade.task_score,
            "answer_format_ok": grade.format_ok,
            "verifier_error": grade.verifier_error,
            "level": self.task.name,
            "expected": self.task.answer,
        }
        return Observation(messages=()), float(grade.correct), True, False, info

    def _tool_turn(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.sandboxed is not None:
            report = self.sandboxed.execute(action, self.episode.turn - 1)
            results, events = report.results, report.risk_events
        else:  # no tools offered: every call is an error observation
            from agentic_rl.tools import execute_tool_calls

            results, events = (
                tuple(execute_tool_calls(action.tool_calls, action.tool_call_errors, {})),
                (),
            )
        self._called = True
        obs, info = self.tool_turn(results, events)
        return obs, 0.0, False, False, info

    def snapshot(self) -> RGSnapshot:
        """The episode state (see the module docstring).

        Raises:
            SnapshotError: the sandbox cannot be snapshotted (no episode, workspace too large).
        """
        box = self.sandboxed.snapshot() if self.sandboxed is not None else None
        return RGSnapshot(self.task, self.episode.done, self.episode.turn, self._called, box)

    def restore(self, snapshot: RGSnapshot) -> None:
        """Bring the episode back to ``snapshot`` (from this env or one built with the same arguments).

        Raises:
            TypeError: ``snapshot`` is not an :class:`RGSnapshot` or does not match the python tool setting.
            SnapshotReplayError: the sandbox's replay diverged (non-deterministic code).
        """
        if not isinstance(snapshot, RGSnapshot) or (snapshot.sandbox is None) != (
            self.sandboxed is None
        ):
            raise TypeError(
                f"{self.env_id or type(self).__name__}: not a snapshot of this env: {type(snapshot).__name__}"
            )
        if self.sandboxed is not None:
            self.sandboxed.restore(snapshot.sandbox)
        self.task, self._called = snapshot.task, snapshot.called
        self.restore_episode(
            EpisodeState(
                snapshot.task is not None, snapshot.turn, snapshot.done, self.episode.trajectory_id
            )
        )

    def grade(self, text: str) -> Grade:
        """The :class:`Grade` of a final reply.

        ``task_score`` is the task's ``score_answer`` of the single answer (0 when there is
        none); ``correct`` is ``task_score >= 1``. Raises only what ``score_answer`` raises.
        """
        assert self.task is not None
        answer = extract_answer(text)
        score = float(self.task.score(answer, self.task.entry)) if answer is not None else 0.0
        score = score if math.isfinite(score) else 0.0
        return Grade(answer, score >= 1.0, score, answer is not None)

    def oracle_reply(self) -> str | None:
        """Reference policy: the generator's gold answer (None when it has none or the episode ended)."""
        if self.task is None or self.episode.done or self.task.answer is None:
            return None
        return f"<answer>{self.task.answer}</answer>"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components listed in the module docstring)."""
        return Rubric(
            [
                RewardFunction("correct_answer", RewardGroup.OUTCOME, correct_answer),
                RewardFunction("task_score", RewardGroup.OUTCOME, task_score, weight=0.0),
                RewardFunction("verifier_errors", RewardGroup.OUTCOME, verifier_errors, weight=0.0),
                RewardFunction("tool_call_format", RewardGroup.PROCESS, tool_call_format),
                RewardFunction("answer_format", RewardGroup.PROCESS, answer_format),
                tool_call_cost(),
                token_cost(),
                *risk_functions(),
            ],
            weights,
        )

    def close(self) -> None:
        """Kill the episode's sandbox (if any) and delete its workspace. Idempotent."""
        if self.sandboxed is not None:
            self.sandboxed.close()


def verifier_errors(trajectory: Trajectory) -> float:
    """1 when the answer verifier itself failed on the final answer (a logged metric), else 0."""
    if trajectory.turns and trajectory.terminated:
        return float(trajectory.turns[-1].info.get("verifier_error") is not None)
    return 0.0


def task_score(trajectory: Trajectory) -> float:
    """The task's own ``score_answer`` of the final answer (0 if the episode did not end with one)."""
    if trajectory.turns and trajectory.terminated:
        return float(trajectory.turns[-1].info.get("task_score", 0.0))
    return 0.0


_ENV_KWARGS = ("python_tool", "permissions", "audit_path", "run_id", "sandbox_backend")


def resolve_rg_id(env_id: str) -> EnvSpec | None:
    """The registry entry (factory, description, recipe) of an ``rg/<task>-v0`` id; None if the id is not of that form.

    The factory takes the env arguments of :class:`ReasoningGymEnv` (``python_tool``,
    ``permissions``, ``audit_path``, ``run_id``, ``sandbox_backend``) and, as further keywords,
    the task's difficulty settings.

    Raises:
        UnknownEnvError: the task is not a reasoning-gym task, or the version is not 0.
    """
    match = _RG_ID.match(env_id)
    if not env_id.startswith("rg/"):
        return None
    names = rg_task_names()
    if match is None or match.group(2) != "0" or match.group(1) not in names:
        task = match.group(1) if match else env_id[3:]
        raise UnknownEnvError(
            f"unknown env id {env_id!r}: ids of this family look like {RG_PATTERN} with a "
            f"reasoning-gym task ({task!r} is not one, or the version is not v0); tasks: "
            f"{', '.join(names)}",
            "the version is not v0" if match is not None and match.group(1) in names else None,
        )
    task = match.group(1)

    def factory(
        python_tool: bool = False,
        context: EnvContext = EnvContext(),
        sandbox_backend: str = "bwrap",
        **settings: Any,
    ) -> ReasoningGymEnv:
        return ReasoningGymEnv(
            (task,),
            {task: settings},
            python_tool=python_tool,
            context=context,
            sandbox_backend=sandbox_backend,
        )

    description = f"reasoning-gym task {task!r} (verifier: its score_answer)"
    return EnvSpec(env_id, factory, description, recipe_overrides=REASONING_GYM_RECIPE)
