"""Shared fixtures for the trajectory tests: a rich, fully populated trajectory."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentic_rl.types import (
    Action,
    MemoryEvent,
    Message,
    Observation,
    RiskEvent,
    StopReason,
    ToolCall,
    ToolCallError,
    ToolResult,
    Trajectory,
    Turn,
)


def build_trajectory(
    i: int = 0, reward: float | None = 1.0, stop_reason: StopReason = StopReason.TERMINATED
) -> Trajectory:
    """A two-turn trajectory with every kind of nested field filled in."""
    call = ToolCall(
        name="calculator",
        arguments={"expr": "2+3", "opts": {"exact": True}},
        raw='{"name": "calculator", "arguments": {"expr": "2+3"}}',
        id="call_0_0",
    )
    turn0 = Turn(
        index=0,
        action=Action(
            text="Let me compute. <tool_call>…</tool_call>",
            tool_calls=(call,),
            tool_call_errors=(ToolCallError(raw="{bad json", message="Expecting value"),),
        ),
        observation=Observation(
            messages=(Message("tool", "5"), Message("tool", "error: Expecting value")),
            tools=({"name": "calculator", "parameters": {"type": "object"}},),
        ),
        reward=0.25,
        tool_results=(
            ToolResult("call_0_0", "calculator", "5"),
            ToolResult("", "", "error: Expecting value", ok=False),
        ),
        token_ids=(1, 2, 3, 4),
        loss_mask=(0, 0, 1, 1),
        logprobs=(0.0, 0.0, -0.123456789012345, -1e-9),
        info={"tool_latency_s": 0.01, "nested": {"list": [1, "two", None]}},
        risk_events=(RiskEvent("denied", "rm", "irreversible", "call_0_0", "tools.rm", True),),
        memory_events=(MemoryEvent("write", True, (3,), 0, 1),),
        process_reward=-0.5,
        context_reset=True,
    )
    turn1 = Turn(
        index=1,
        action=Action(text="The answer is 5 — ünïcode\nline2"),
        observation=None,
        reward=1.0,
        tool_results=(),
        token_ids=(5, 6),
        loss_mask=(1, 1),
        logprobs=(-0.5, -2.25),
        info={},
    )
    return Trajectory(
        env_id="calculator-v0",
        seed=42 + i,
        group_id=f"g{i // 2}",
        trajectory_id=f"t{i}",
        messages=(
            Message("system", "You are helpful."),
            Message("user", "2+3?"),
            Message("assistant", "Let me compute."),
            Message("tool", "5"),
        ),
        turns=(turn0, turn1),
        token_ids=(1, 2, 3, 4, 5, 6),
        loss_mask=(0, 0, 1, 1, 1, 1),
        logprobs=(0.0, 0.0, -0.123456789012345, -1e-9, -0.5, -2.25),
        stop_reason=stop_reason,
        reward=reward,
        reward_components={"correct_answer": 1.0, "tool_call_format": -0.5},
        info={"level": "easy", "answer": "5"},
    )


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    """Factory fixture: ``make_trajectory(i, reward=..., stop_reason=...)``."""
    return build_trajectory


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory, chat):
    """A run directory recorded for real: the calculator-v0 oracle (ScriptedPolicy) on 6 seeds
    through the rollout engine, scored by the env's rubric, stored as the recipe stores them
    (two shards: an RL step of 4 with a wrong answer in one, and an eval of 2)."""
    from agentic_rl.config import load_config, save_config
    from agentic_rl.envs import make
    from agentic_rl.policy.scripted import ScriptedPolicy
    from agentic_rl.rollout import RolloutConfig, run_episodes
    from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record

    run_dir = tmp_path_factory.mktemp("runs") / "recorded"
    run_dir.mkdir()
    save_config(load_config(None, []), run_dir / "config.toml")
    store = TrajectoryStore(run_dir / "trajectories")
    for phase, seeds in (("rl", [0, 0, 1, 1]), ("eval", [1_000_000, 1_000_001])):
        envs = [make("calculator-v0") for _ in seeds]

        def reply(i, _context, envs=envs):
            text = envs[i].oracle_reply() or ""
            return "<answer>-1</answer>" if (i == 1 and text.startswith("<answer>")) else text

        trajs = run_episodes(
            ScriptedPolicy(chat, reply),
            chat,
            envs,
            seeds,
            [f"{phase}-{s}" for s in seeds],
            RolloutConfig(max_turns=3, max_new_tokens=96),
        )
        rubric = envs[0].rubric()
        trajs = [rubric.apply(t) for t in trajs]
        store.append(
            [
                trajectory_to_record(
                    t,
                    run_id="recorded",
                    phase=phase,
                    step=1,
                    env_kwargs={},
                    advantage=(0.5 if t.reward_components["outcome"] >= 1 else -0.5),
                )
                for t in trajs
            ]
        )
    return run_dir
