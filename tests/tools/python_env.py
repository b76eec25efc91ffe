"""A small env whose tools run in the sandbox (python + workspace files), for tests.

Task: the seed's number n; the answer is n * 7. The tools are those of
:class:`~agentic_rl.tools.sandbox.env_tools.SandboxedTools`; a reply without tool calls is final.
Snapshot = (task, turn, done, sandbox snapshot).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentic_rl.envs.base import Env, EpisodeEndedError, EpisodeNotStartedError
from agentic_rl.rewards import (
    RewardFunction,
    RewardGroup,
    RewardWeights,
    Rubric,
    extract_answer,
    numbers_equal,
)
from agentic_rl.rewards.risk import risk_functions
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.env_tools import SandboxedTools
from agentic_rl.tools.sandbox.snapshot import SandboxSnapshot
from agentic_rl.types import Action, Message, Observation, Trajectory


@dataclasses.dataclass(frozen=True)
class PythonEnvSnapshot:
    seed: int | None
    turn: int
    done: bool
    sandbox: SandboxSnapshot


class PythonScratchEnv(Env):
    """Multiply by 7 with a sandboxed python tool (test env)."""

    env_id = "python-scratch-v0"
    description = "test env: sandboxed python and workspace files"

    def __init__(
        self,
        permissions: dict[str, Any] | None = None,
        audit_path: str | None = None,
        config: SandboxConfig | None = None,
    ):
        self.sandboxed = SandboxedTools(
            config or SandboxConfig(timeout_s=2.0), permissions, audit_path
        )
        self.seed: int | None = None
        self.turn, self.done = 0, False

    def reset(self, seed=None, options=None):
        self.seed, self.turn, self.done = int(seed or 0), 0, False
        self.sandboxed.reset((options or {}).get("trajectory_id"))
        obs = Observation(
            (Message("system", "Use python."), Message("user", f"What is {self.seed} * 7?")),
            self.sandboxed.schemas(),
        )
        return obs, {}

    def step(self, action: Action):
        if self.seed is None:
            raise EpisodeNotStartedError("reset first")
        if self.done:
            raise EpisodeEndedError("episode ended")
        self.turn += 1
        if action.tool_calls or action.tool_call_errors:
            report = self.sandboxed.execute(action, self.turn - 1)
            info = {"tool_calls": len(report.results)}
            return (
                Observation(
                    tuple(Message("tool", r.content) for r in report.results),
                    tool_results=report.results,
                    risk_events=report.risk_events,
                ),
                0.0,
                False,
                False,
                info,
            )
        self.done = True
        correct = numbers_equal(extract_answer(action.text), str(self.seed * 7))
        return Observation(()), float(correct), True, False, {"correct": correct}

    def snapshot(self) -> PythonEnvSnapshot:
        return PythonEnvSnapshot(self.seed, self.turn, self.done, self.sandboxed.snapshot())

    def restore(self, snapshot: PythonEnvSnapshot) -> None:
        if not isinstance(snapshot, PythonEnvSnapshot):
            raise TypeError(f"expected a PythonEnvSnapshot, got {type(snapshot).__name__}")
        self.sandboxed.restore(snapshot.sandbox)
        self.seed, self.turn, self.done = snapshot.seed, snapshot.turn, snapshot.done

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        return Rubric(
            [RewardFunction("correct", RewardGroup.OUTCOME, _correct), *risk_functions()], weights
        )

    def close(self) -> None:
        self.sandboxed.close()


def _correct(trajectory: Trajectory) -> float:
    last = trajectory.turns[-1].info if trajectory.turns else {}
    return 1.0 if last.get("correct") else 0.0
