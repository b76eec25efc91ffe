"""Off-policy guidance: the env oracle's trajectory in a group that sampled no success.

A group whose G rollouts all fail has zero group-relative advantage: it teaches nothing, and
dynamic sampling drops it. On tasks the policy never solves at its sampling temperature this is
an exploration wall, not a credit-assignment problem (measured on calculator-v0's
parenthesised and three-number tasks, docs/training_runs.md). Off-policy guidance (LUFFY, Yan et
al. 2025, "Learning to Reason under Off-Policy Guidance", arXiv:2504.14945) mixes an off-policy
successful trajectory into such a group, so the group-relative advantage pushes the policy
toward it and away from its own failures.

With ``sampling.guidance = "oracle"``, after a sampling round is scored, each group (at most
``sampling.guidance_groups`` per round, in sampling order) whose scored rollouts all missed
the outcome gets the env oracle's episode on the same seed (:meth:`Env.oracle_reply`, rolled
out through the same token-in/token-out path as the warm-up demonstrations) in place of its
last rollout, provided the oracle's episode succeeds within the rollout budgets. The group
keeps its size G; credit assignment then sees G − 1 failures and one success.

The PPO ratio of the oracle's tokens. The oracle is deterministic (μ = 1), so its recorded
logprobs would give a ratio π_θ/1 that is tiny and whose gradient, A·π_θ·∇logπ_θ, vanishes on
exactly the tokens the policy does not yet produce (LUFFY's argument for policy shaping). Here
the oracle's tokens are instead stamped with the trainer's own logprobs at the step's
weights (one no-grad forward, the update's scoring path), i.e. the trajectory is treated as if
the current policy had sampled it: the first minibatch's ratio is exactly 1, the gradient is
A·∇logπ_θ (an advantage-weighted log-likelihood step) and the usual clip bounds later
minibatches. This drops LUFFY's regularised importance weight f(π) = π/(π + γ); it is the
simpler "ratio 1" treatment of off-policy samples also used by guidance methods that replay
reference solutions into GRPO groups.

Guided trajectories are marked ``info["guidance"] = "oracle"`` (kept in the stored records and
the viewer) and are left out of the ``rollout/*`` success metrics and of the task pool's
success counts, which measure the policy's own samples; ``rollout/groups_guided`` counts the
guided groups a step trained on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trainer.evaluation.held_out import is_success
from agentic_rl.trainer.learning.mismatch_correction import old_policy_logprobs
from agentic_rl.trainer.run import Run, env_kwargs
from agentic_rl.types import Trajectory

__all__ = [
    "GUIDANCE_KEY",
    "failed_groups",
    "guide_round",
    "is_guided",
    "oracle_episodes",
    "restamp_logprobs",
]

#: the ``info`` key marking an off-policy guidance trajectory (value: its source, "oracle")
GUIDANCE_KEY = "guidance"


def is_guided(trajectory: Trajectory) -> bool:
    """True for a trajectory that off-policy guidance put into its group."""
    return bool(trajectory.info.get(GUIDANCE_KEY))


def failed_groups(trajectories: Sequence[Trajectory]) -> list[str]:
    """Group ids, in first-seen order, with at least one scored rollout and no success among
    them (failed, unscored rollouts are ignored)."""
    scored: dict[str, list[bool]] = {}
    for t in trajectories:
        scored.setdefault(t.group_id, [])
        if not t.failed:
            scored[t.group_id].append(is_success(t))
    return [g for g, ok in scored.items() if ok and not any(ok)]


def restamp_logprobs(trajectory: Trajectory, logprobs: Sequence[float]) -> Trajectory:
    """A copy of ``trajectory`` whose flat and per-turn logprobs are ``logprobs``.

    Args:
        logprobs: one value per token of ``trajectory.token_ids`` (length T), in nats.

    Raises:
        ValueError: ``logprobs`` does not have length T.
    """
    if len(logprobs) != len(trajectory.token_ids):
        raise ValueError(
            f"restamp_logprobs: {len(logprobs)} logprobs for {len(trajectory.token_ids)} tokens"
        )
    values = tuple(float(x) for x in logprobs)
    turns, start = [], 0
    for turn in trajectory.turns:  # the turns' spans tile the stream from its start
        end = start + len(turn.token_ids)
        turns.append(dataclasses.replace(turn, logprobs=values[start:end]))
        start = end
    return dataclasses.replace(trajectory, logprobs=values, turns=tuple(turns))


def oracle_episodes(
    run: Run,
    seeds: Sequence[int],
    group_ids: Sequence[str],
    kwargs: dict,
    *,
    env_id: str | None = None,
    rollout: RolloutConfig | None = None,
) -> list[Trajectory]:
    """The env oracle's scored episodes, one per seed, through the normal token-in/token-out
    path (:meth:`Env.oracle_reply` as a scripted policy); ``kwargs`` are the env's constructor
    arguments. Used for the warm-up's demonstrations and for guidance. No seeds gives [].

    Args:
        env_id, rollout: the env and its budgets (a mixture's env); None = ``env.id`` and
            ``[rollout]``.
    """
    cfg = run.config
    envs = [run.scale.make_env(env_id or cfg.env.id, **kwargs) for _ in seeds]
    if not envs:
        return []
    try:
        oracle = ScriptedPolicy(run.chat, lambda i, _context: envs[i].oracle_reply() or "")
        episodes = run_episodes(
            oracle, run.chat, envs, list(seeds), list(group_ids), rollout or cfg.rollout
        )
        return envs[0].rubric(cfg.reward).apply_batch(episodes)
    finally:
        for env in envs:
            env.close()


def guide_round(
    run: Run,
    trajectories: list[Trajectory],
    *,
    env_id: str | None = None,
    kwargs: dict | None = None,
    rollout: RolloutConfig | None = None,
) -> list[Trajectory]:
    """The scored rollouts of one sampling round, with off-policy guidance applied.

    ``env_id``, ``kwargs``, ``rollout``: the env of ``trajectories``, its constructor arguments
    and budgets when it is one env of a mixture (its oracle guides them); None = the run's env.

    Returns ``trajectories`` unchanged when ``sampling.guidance`` is off; otherwise the same
    list where, in each of the first ``sampling.guidance_groups`` all-failed groups whose
    oracle episode succeeds, the group's last rollout is replaced by that episode (group id
    kept, logprobs restamped with the trainer's, ``info["guidance"] = "oracle"``; module
    docstring). An env without an oracle (``oracle_reply`` None) guides nothing: its empty
    replies fail and are not used.
    """
    sampling = run.config.sampling
    if sampling.guidance == "off" or sampling.guidance_groups == 0:
        return trajectories
    targets = failed_groups(trajectories)[: sampling.guidance_groups]
    if not targets:
        return trajectories
    members = {g: [t for t in trajectories if t.group_id == g] for g in targets}
    seeds = [members[g][0].seed for g in targets]
    kwargs = env_kwargs(run) if kwargs is None else kwargs
    demos = oracle_episodes(run, seeds, targets, kwargs, env_id=env_id, rollout=rollout)
    demos = [d for d in demos if not d.failed and is_success(d)]
    if not demos:
        return trajectories
    rows = old_policy_logprobs(run.model, demos, run.loss)
    replace: dict[int, Trajectory] = {}
    for demo, row in zip(demos, rows):
        victim = members[demo.group_id][-1]
        replace[id(victim)] = dataclasses.replace(
            restamp_logprobs(demo, row),
            info={**demo.info, GUIDANCE_KEY: sampling.guidance},
            policy_version=victim.policy_version,
        )
    return [replace.get(id(t), t) for t in trajectories]
