"""Evaluation: greedy rollouts on fixed held-out seeds, aggregated per difficulty level.

Success of an episode is ``reward_components["outcome"] >= 1`` (the outcome group's weighted
sum reaches its maximum, e.g. a correct final answer). Episodes are grouped by the ``level``
key of the env's reset info when present.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.envs import Env, make
from agentic_rl.policy.base import Policy
from agentic_rl.policy.chat_template import AnyChatFormat as ChatFormat
from agentic_rl.rewards import RewardWeights
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.types import Trajectory


def is_success(trajectory: Trajectory) -> bool:
    """True when the trajectory's outcome group reached 1 (see the module docstring)."""
    return trajectory.reward_components.get("outcome", 0.0) >= 1.0 - 1e-9


def summarize(trajectories: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """Mean success, total reward, each reward component, turns, tool calls and tokens.

    Failed trajectories count as unsuccessful and are reported as ``{prefix}/failed``.

    Returns:
        a flat dict of floats with keys ``{prefix}/success``, ``{prefix}/success/<level>``,
        ``{prefix}/reward_total``, ``{prefix}/reward/<component>``, ``{prefix}/turns``,
        ``{prefix}/tool_calls``, ``{prefix}/generated_tokens``, ``{prefix}/failed``.
    """
    n = max(len(trajectories), 1)
    scored = [t for t in trajectories if not t.failed]
    out: dict[str, float] = {
        f"{prefix}/success": sum(is_success(t) for t in scored) / n,
        f"{prefix}/failed": (len(trajectories) - len(scored)) / n,
        f"{prefix}/turns": sum(len(t.turns) for t in trajectories) / n,
        f"{prefix}/tool_calls": sum(len(t.tool_calls) for t in trajectories) / n,
        f"{prefix}/generated_tokens": sum(t.num_generated_tokens for t in trajectories) / n,
    }
    if scored:
        out[f"{prefix}/reward_total"] = sum(t.reward for t in scored) / len(scored)
        for name in scored[0].reward_components:
            out[f"{prefix}/reward/{name}"] = sum(
                t.reward_components.get(name, 0.0) for t in scored
            ) / len(scored)
    by_level: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        if t.level is not None:
            by_level[t.level].append(t)
    for level, items in sorted(by_level.items()):
        out[f"{prefix}/success/{level}"] = sum(is_success(t) and not t.failed for t in items) / len(
            items
        )
    return out


def evaluate(
    policy: Policy,
    chat: ChatFormat,
    env_id: str,
    env_kwargs: dict[str, Any],
    seeds: Sequence[int],
    rollout: RolloutConfig,
    weights: RewardWeights,
    *,
    batch_size: int = 128,
    make_env: Callable[..., Env] = make,
    group_prefix: str = "eval",
) -> tuple[dict[str, float], list[Trajectory]]:
    """Greedy rollouts on ``seeds``, scored with the env's rubric.

    ``make_env(env_id, **env_kwargs)`` builds each episode's env: :func:`agentic_rl.envs.make`
    (in this process) or ``EnvWorkerPool.make`` (in Ray env workers,
    :mod:`agentic_rl.rollout.env_workers`). Each episode's group id is
    ``<group_prefix>-<seed>``.

    Returns:
        ``(metrics, trajectories)`` with metrics from :func:`summarize` under ``eval/``.
    """
    trajectories: list[Trajectory] = []
    for start in range(0, len(seeds), batch_size):
        chunk = list(seeds[start : start + batch_size])
        envs = [make_env(env_id, **env_kwargs) for _ in chunk]
        rubric = envs[0].rubric(weights)
        batch = run_episodes(
            policy, chat, envs, chunk, [f"{group_prefix}-{s}" for s in chunk], rollout, greedy=True
        )
        trajectories.extend(rubric.apply_batch(batch))
        for env in envs:
            env.close()
    return summarize(trajectories, "eval"), trajectories
