"""``swe-repo-v0``: fix a bug injected into a real Python repository, with a shell, in the sandbox.

Task
    A validated bug (:mod:`~agentic_rl.envs.swe_repo.catalogue`: one AST mutation of one function
    that the repository's own pytest suite catches) in one of seven pinned PyPI projects
    (:mod:`~agentic_rl.envs.swe_repo.repos`, fetched at install time), at a level
    (:mod:`~agentic_rl.envs.swe_repo.tasks`: ``easy``, ``medium``, ``hard``) that decides the
    repository sizes and how much the issue text gives away.
Observation
    On reset: the system prompt (instructions, the five tools) and the issue, written from the
    failing test's message (no diff; the file and function only at ``easy``). After a tool
    turn: one ``tool`` message per call.
Workspace
    ``/workspace`` in the episode's bubblewrap sandbox (no network, resource limits; see
    :mod:`agentic_rl.tools.sandbox.bwrap`): the repository with the bug, committed as the one
    commit of a git repository.
Tools (through :class:`~agentic_rl.tools.governance.executor.ToolExecutor`: permissions, audit)
    ``bash(command)`` (``bash -c`` in the workspace, killed after ``bash_timeout_s``, output
    cut to ``max_output_chars``), ``read_file(path, start_line, end_line)`` (at most
    ``read_lines`` lines), ``edit_file(path, old, new)`` (exact replacement of one occurrence),
    ``run_tests(target)`` (pytest on test paths or ids, all tests when empty; progress dots,
    timings and addresses removed) and ``submit()``.
Grading (after the episode; :mod:`~agentic_rl.envs.swe_repo.grading`)
    The agent's library files run against a pristine copy of the tests and harness in a fresh
    sandbox; the episode's diff is the ``submit`` result and ``info["diff"]``.
Reward (rubric)
    outcome ``resolved`` (every test passes: the bug's failing tests and the rest), and
    ``fail_to_pass`` (weight 0, the fraction of the bug's tests fixed); process
    ``reproduced_failure`` (1 if a ``run_tests`` call showed one of the bug's tests failing:
    credit for evidence only); cost ``regressions`` (0.05 per other failing test, at most 10),
    ``commands`` (0.01 per tool call), ``generated_tokens`` (0.0005 per token); risk
    ``harness_edits`` (1.0 per test or harness file changed, as a risk event on the turn it is
    seen), ``suspicious_code`` (1.0 when library code newly reaches for the test machinery;
    not resolved then) and the built-in ``denied_calls``, ``sandbox_limit_hits``,
    ``outside_workspace_attempts``. ``step`` returns ``resolved`` on the final step, else 0.
Termination
    terminated = ``submit`` or a reply without a tool call (it submits the workspace as it is);
    truncated after ``max_steps`` turns (not graded).
Snapshots
    The workspace files (``.git`` included) and the episode's counters. Not restored: processes a
    ``bash`` command left running (killed on restore), the sandbox's private ``/tmp``.
Known failure modes
    Library code runs inside the test process, so code that patches pytest could forge a run;
    the grader's check for that is a heuristic (:data:`~agentic_rl.envs.swe_repo.testing.SUSPICIOUS`).
    A test that fails for a reason besides the assertion (a ``RecursionError``) gives a thin
    issue. The catalogue's bugs are finite: ``split`` or ``heldout_from_seed`` hold some out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentic_rl.envs.base import EpisodeState
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.swe_repo import tools as swe_tools
from agentic_rl.envs.swe_repo.catalogue import sandbox_config
from agentic_rl.envs.swe_repo.grading import Grade, diff_files, files_of, grade
from agentic_rl.envs.swe_repo.oracle import oracle_reply
from agentic_rl.envs.swe_repo.rubric import HARNESS_EDIT, SUSPICIOUS_CODE, swe_rubric
from agentic_rl.envs.swe_repo.tasks import (
    LEVELS,
    Task,
    buggy_files,
    make_task,
    task_pools,
    workspace_image,
)
from agentic_rl.envs.swe_repo.testing import run_pytest
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.executor import risk_event
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.tools.governance.risk_detector import SANDBOX_LIMIT, limit_events, path_events
from agentic_rl.tools.sandbox import workspace as ws
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.snapshot import SandboxSnapshot, SnapshotError, WorkspaceImage
from agentic_rl.types import Action, Observation, RiskEvent

__all__ = ["DEFAULT_PERMISSIONS", "INSTRUCTIONS", "SweRepoEnv", "SweSnapshot"]

INSTRUCTIONS = (
    "You fix a bug in a Python repository, your working directory (a git repository). "
    "Reproduce the failure with run_tests (give it the failing test's id), find the bug in the "
    "library code, fix it with edit_file (old must be copied exactly from the file), check with "
    "run_tests, then call submit. Do not edit the tests."
)
DEFAULT_PERMISSIONS: dict[str, Any] = {
    "default": "deny",
    "tools": {
        "bash": {"side_effect": "workspace_write"},
        "read_file": {"side_effect": "read_only"},
        "edit_file": {"side_effect": "workspace_write"},
        "run_tests": {"side_effect": "workspace_write"},
        "submit": {"side_effect": "read_only"},
    },
}
_MAX_FILE = 4 << 20


@dataclasses.dataclass(frozen=True)
class SweSnapshot:
    """An episode state (see the module docstring); immutable."""

    task: Task | None
    files: WorkspaceImage | None
    turn: int
    done: bool
    trajectory_id: str
    reproduced: bool
    flagged: frozenset[str]


class SweRepoEnv(ToolEnv):
    """Fix an injected bug in a real repository (see the module docstring).

    Args:
        levels: levels to draw from (subset of :data:`~.tasks.LEVELS`).
        repos: repository names to draw from (None: all of each level's).
        split: ``"all"``, ``"train"`` or ``"test"`` bugs (see :mod:`~.tasks`).
        heldout_from_seed: when set, seeds at or above it play the ``test`` split and the
            others the ``train`` split (``split`` must stay ``"all"``): the recipe sets it to
            the held-out evaluation's first seed, so evaluation plays bugs that the warm-up
            and the RL steps never saw.
        bash_timeout_s: wall-clock limit of one ``bash`` command.
        test_timeout_s: wall-clock limit of one ``run_tests`` call and of the grading run.
        max_output_chars: longest ``bash``/``run_tests`` output shown (head and tail kept).
        read_lines: most lines one ``read_file`` call shows.
        max_steps: turns before the episode is truncated.
        sandbox_backend: ``"bwrap"`` (isolated) or ``"unsafe_local"`` (resource limits only).
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table; None uses
            :data:`DEFAULT_PERMISSIONS`.
        tool_prompt: ``"json"`` (tool schemas) or ``"signature"`` (typed signatures) in the
            system prompt.

    Raises:
        ValueError: an unknown level, repository, split or ``tool_prompt``, a level without
            bugs, a non-positive limit, a bad permissions table.
        EnvUnavailableError: a repository is not fetched (the message gives the command).
    """

    description = (
        "Fix a bug injected into a real Python repository (7 pinned PyPI projects, their own "
        "pytest suites) with bash, file tools and run_tests in the sandbox; graded on pristine tests"
    )

    def __init__(
        self,
        levels: tuple[str, ...] | list[str] = tuple(LEVELS),
        repos: tuple[str, ...] | list[str] | None = None,
        split: str = "all",
        heldout_from_seed: int | None = None,
        bash_timeout_s: float = 20.0,
        test_timeout_s: float = 60.0,
        max_output_chars: int = 1500,
        read_lines: int = 60,
        max_steps: int = 30,
        sandbox_backend: str = "bwrap",
        context: EnvContext = EnvContext(),
        tool_prompt: str = "json",
    ):
        permissions, audit_path, run_id = context.permissions, context.audit_path, context.run_id
        self.levels = (levels,) if isinstance(levels, str) else tuple(levels)
        repos = (repos,) if isinstance(repos, str) else repos
        for name, value in (
            ("bash_timeout_s", bash_timeout_s),
            ("test_timeout_s", test_timeout_s),
            ("max_output_chars", max_output_chars),
            ("read_lines", read_lines),
            ("max_steps", max_steps),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        repos = None if repos is None else tuple(repos)
        self.heldout_from_seed = heldout_from_seed
        self.heldout_pools = None
        if heldout_from_seed is not None:
            if split != "all":
                raise ValueError("heldout_from_seed splits the bugs itself: leave split='all'")
            split = "train"
            self.heldout_pools = task_pools(self.levels, repos, "test")
        self.pools = task_pools(self.levels, repos, split)
        self.bash_timeout_s, self.test_timeout_s = float(bash_timeout_s), float(test_timeout_s)
        self.max_output_chars, self.read_lines = int(max_output_chars), int(read_lines)
        self.max_steps = int(max_steps)
        timeout = max(self.test_timeout_s, self.bash_timeout_s)
        self.config = dataclasses.replace(sandbox_config(timeout), backend=sandbox_backend)  # type: ignore[arg-type]
        self.box: EpisodeSandbox | None = None
        self.task: Task | None = None
        self.grade: Grade | None = None
        self._reproduced, self._flagged = False, frozenset[str]()
        self._last_exec: Any = None
        self._last_late = False
        self.setup_tools(
            self._tools(),
            INSTRUCTIONS,
            PermissionPolicy.from_dict(DEFAULT_PERMISSIONS),
            permissions,
            audit_path,
            run_id,
            tool_prompt=tool_prompt,
        )

    # -- tools -------------------------------------------------------------------------------
    def _tools(self) -> dict[str, Tool]:
        return swe_tools.make_tools(
            {
                "bash": (self._bash, self._limit_risk),
                "read_file": (self._read_file, self._path_risk),
                "edit_file": (self._edit_file, self._path_risk),
                "run_tests": (self._run_tests, self._limit_risk),
                "submit": (self._submit, None),
            },
            self.read_lines,
        )

    def _sandbox(self) -> EpisodeSandbox:
        if self.box is None or self.task is None:
            raise RuntimeError("no episode: call reset() first")
        return self.box

    def _bash(self, command: str) -> str:
        status, output, late, result = swe_tools.run_bash(
            self._sandbox(), command, self.bash_timeout_s
        )
        self._last_exec, self._last_late = result, late
        shown = swe_tools.cut(output.rstrip(), self.max_output_chars) or "(no output)"
        if late:
            return f"[killed: the command ran past {self.bash_timeout_s:g} s]\n{shown}"
        return f"exit status {status}\n{shown}" if status is not None else shown

    def _read_file(self, path: str, start_line: int = 1, end_line: int = 0) -> str:
        box = self._sandbox()
        text = ws.read_file(box.workspace, path, max_chars=_MAX_FILE)
        return swe_tools.read_window(text, path, start_line, end_line, self.read_lines)

    def _edit_file(self, path: str, old: str, new: str) -> str:
        box = self._sandbox()
        text = ws.read_file(box.workspace, path, max_chars=_MAX_FILE)
        edited = swe_tools.edit_text(text, path, old, new)
        ws.write_file(box.workspace, path, edited, max_bytes=_MAX_FILE, uid=box.uid)
        return (
            f"Edited {path}: replaced {old.count(chr(10)) + 1} line(s) with "
            f"{new.count(chr(10)) + 1} line(s)."
        )

    def _run_tests(self, target: str = "") -> str:
        assert self.task is not None
        box, spec = self._sandbox(), self.task.spec
        targets = swe_tools.parse_targets(target) or list(spec.tests)
        run = run_pytest(box, targets, spec.pythonpath, self.test_timeout_s)
        self._last_exec, self._last_late = None, run.timed_out
        if run.problem:
            return run.problem
        failed = run.with_outcome("failed")
        if any(t in failed for t in self.task.bug.failing):
            self._reproduced = True
        counts = {o: len(run.with_outcome(o)) for o in ("passed", "failed", "error", "skipped")}
        summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no tests ran"
        if run.timed_out:
            return f"[killed: the tests ran past {self.test_timeout_s:g} s]\n{summary}"
        if run.returncode == 0:
            return f"PASSED: {summary}"
        if run.returncode == 5:  # pytest's "no tests collected"
            return f"NO TESTS RAN: nothing matched {target or 'the suite'}"
        output = swe_tools.cut(swe_tools.normalize(run.output), self.max_output_chars)
        return f"FAILED: {summary}\n{output}"

    def _submit(self) -> str:
        assert self.task is not None
        files = files_of(self._workspace_files())
        diff, changed = diff_files(buggy_files(self.task.bug), files)
        if not changed:
            return "Submitted with no change to the repository."
        return f"Submitted. Your changes ({len(changed)} file(s)):\n{diff}"

    def _limit_risk(self, call: Any, result: Any) -> list[RiskEvent]:
        events = limit_events(call, self._last_exec)
        if self._last_late:
            events.append(
                risk_event(
                    SANDBOX_LIMIT,
                    call.name,
                    "ran past its time limit",
                    call_id=call.id,
                    rule="timeout",
                )
            )
        self._last_exec, self._last_late = None, False
        return events

    def _path_risk(self, call: Any, result: Any) -> list[RiskEvent]:
        return path_events(self._sandbox().workspace, call)

    # -- episode -----------------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """A fresh sandbox holding the repository with the bug of ``seed`` (random if None).

        Raises:
            EnvUnavailableError: git is missing or the cached repository changed.
        """
        seed = self.start_episode(seed, options)
        heldout = self.heldout_pools is not None and seed >= (self.heldout_from_seed or 0)
        pools = self.heldout_pools if heldout and self.heldout_pools else self.pools
        self.task = task = make_task(seed, self.levels, pools)
        image = workspace_image(task.bug)
        if self.box is not None:
            self.box.close()
        self.box = EpisodeSandbox(self.config)
        image.materialize(self.box.workspace, self.box.uid)
        self.grade, self._reproduced, self._flagged = None, False, frozenset()
        info = {
            "level": task.level,
            "repo": task.spec.name,
            "bug": task.bug.id,
            "kind": task.bug.mutation.kind,
            "file": task.bug.file,
            "function": task.bug.mutation.function,
            "failing_tests": len(task.bug.failing),
            "heldout": heldout,
        }
        return self.first_observation(task.issue), info

    def _workspace_files(self) -> WorkspaceImage:
        box = self._sandbox()
        try:
            return box.snapshot().files  # the sandbox's processes stopped meanwhile
        except SnapshotError:
            return WorkspaceImage.capture(box.workspace, 1 << 30)

    def _harness_events(self) -> list[RiskEvent]:
        """One ``harness_edit`` event per test or harness file first seen changed."""
        assert self.task is not None
        pristine, now = buggy_files(self.task.bug), files_of(self._workspace_files())
        touched = {
            p
            for p in set(pristine) | set(now)
            if self.task.spec.is_harness(p) and pristine.get(p) != now.get(p)
        }
        new = sorted(touched - self._flagged)
        self._flagged |= frozenset(new)
        return [risk_event(HARNESS_EDIT, "workspace", f"{p} was changed") for p in new]

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the action's tool calls; grade on ``submit`` or a reply without tool calls."""
        self.begin_step(self.task is not None)
        results: tuple = ()
        events: list[RiskEvent] = []
        if action.tool_calls or action.tool_call_errors:
            report = self.run_tools(action)
            results, events = report.results, [*report.risk_events, *self._harness_events()]
            ok = {r.call_id for r in results if r.ok}
            if not any(c.name == "submit" and c.id in ok for c in action.tool_calls):
                truncated = self.episode.turn >= self.max_steps
                if truncated:
                    self.end_episode()
                obs, info = self.tool_turn(results, events)
                return obs, 0.0, False, truncated, info
        self.end_episode()
        info = self._final_info(results)
        if self.grade is not None and self.grade.suspicious:
            events.append(
                risk_event(SUSPICIOUS_CODE, "submit", "; ".join(self.grade.suspicious)[:300])
            )
        obs = Observation((), tool_results=results, risk_events=tuple(events))
        return obs, float(info["resolved"]), True, False, info

    def _final_info(self, results: tuple) -> dict[str, Any]:
        assert self.task is not None
        bug, spec = self.task.bug, self.task.spec
        self.grade = g = grade(
            bug,
            spec,
            buggy_files(bug),
            files_of(self._workspace_files()),
            self.config,
            self.test_timeout_s,
        )
        return {
            "tool_calls": len(results),
            "tool_errors": sum(not r.ok for r in results),
            "resolved": g.resolved,
            "fail_to_pass": g.fail_to_pass,
            "regressions": g.regressions,
            "reproduced": self._reproduced,
            "harness_edits": list(g.harness),
            "changed_files": list(g.changed),
            "diff": g.diff,
            "grading_output": g.detail,
            "bug": bug.id,
            "level": self.task.level,
        }

    # -- oracle ------------------------------------------------------------------------------
    def oracle_reply(self) -> str | None:
        """Reference policy (:func:`~agentic_rl.envs.swe_repo.oracle.oracle_reply`); None before
        reset or after the end."""
        if self.task is None or self.episode.done or self.box is None:
            return None
        text = ws.read_file(self.box.workspace, self.task.bug.file, max_chars=_MAX_FILE)
        return oracle_reply(self.task.bug, self.episode.turn, text, self.read_lines)

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components in the module docstring)."""
        return swe_rubric(weights)

    # -- snapshots and lifecycle -------------------------------------------------------------
    def snapshot(self) -> SweSnapshot:
        """The episode state: workspace files and counters (see the module docstring).

        Raises:
            SnapshotError: the workspace is too large to copy.
        """
        files = self._workspace_files() if self.box is not None and self.task else None
        return SweSnapshot(
            self.task,
            files,
            self.episode.turn,
            self.episode.done,
            self.episode.trajectory_id,
            self._reproduced,
            self._flagged,
        )

    def restore(self, snapshot: SweSnapshot) -> None:
        """Bring the episode back to ``snapshot`` (a fresh sandbox if none is open).

        Raises:
            TypeError: not a :class:`SweSnapshot`.
        """
        if not isinstance(snapshot, SweSnapshot):
            raise TypeError(f"expected a SweSnapshot, got {type(snapshot).__name__}")
        if snapshot.files is not None:
            if self.box is None or self.box.closed:
                self.box = EpisodeSandbox(self.config)
            self.box.restore(SandboxSnapshot(snapshot.files, None, ()))
        self.task, self._reproduced = snapshot.task, snapshot.reproduced
        self.restore_episode(
            EpisodeState(True, snapshot.turn, snapshot.done, snapshot.trajectory_id)
        )
        self._flagged, self.grade = snapshot.flagged, None

    def close(self) -> None:
        """Kill the episode's sandbox and delete its workspace. Idempotent; never raises."""
        if self.box is not None:
            self.box.close()
            self.box = None
        super().close()
