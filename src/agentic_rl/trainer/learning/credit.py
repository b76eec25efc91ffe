"""Credit assignment for the recipe: ``algorithm.name`` → per-token advantages of a batch.

Each name is one function of the scored trajectories of an RL step (all groups together) and
the ``[algorithm]`` config; every one works on every env, because what it reads off a
trajectory (reward, turns, tool results, observations) every env produces
(:mod:`agentic_rl.algorithms.trajectory_steps`).

========== ============================================================================
name       advantage of a token of turn k of trajectory i in group g
========== ============================================================================
grpo       (R_i − mean_g R) / (std R + ε), std over g (``std_scope="group"``) or the batch
dr_grpo    R_i − mean_g R                                   (no std, Liu et al. 2025)
rloo       R_i − mean of the other members of g             (Ahmadian et al. 2024)
reinforce_pp  REINFORCE++-baseline: token returns of R_i − mean_g R, whitened over all
           tokens of the batch (Hu et al. 2025)
ppo        GAE(γ, λ) over the sampled tokens from a value head on the policy, turn rewards r_k
           on each turn's last token, clipped value loss (Schulman et al. 2017)
gigpo      A^E_i + ω·A^S_{i,k}: episode groups + step groups of equal anchor observations
           (Feng et al. 2025)
turn_grpo  A^O_i + c·Σ_{j≥k} γ^{j−k} p̃_{i,j}: outcome GRPO plus the return of group-normalised
           per-turn process rewards (turn-level credit, after PRIME, Cui et al. 2025)
========== ============================================================================

R_i is the rubric total; r_k the per-turn rewards (summing to R_i); p_k the per-turn process
rewards (an env's ``Turn.process_reward``, else the tool-health signal).

Notes: every member of a group acts on the same first observation, so GiGPO's turn-0 step
group is the whole group (with γ = 1 its step advantage then equals the episode one); the
GiGPO paper uses γ = 0.95 (``algorithm.gamma``), which also prefers shorter successes.
With ``ppo_epochs = 1`` (the default) ``ppo``'s value clip is inactive (V_old = V of the same
pass); with more epochs the later ones clip around the first pass's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from agentic_rl.algorithms import (
    dr_grpo_advantages,
    gigpo_advantages,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    turn_process_advantages,
)
from agentic_rl.algorithms.trajectory_steps import (
    anchor_keys,
    pad_turns,
    token_turn_index,
    turn_process_rewards,
    turn_rewards,
)
from agentic_rl.config import AlgorithmConfig
from agentic_rl.types import Trajectory

__all__ = [
    "ALGORITHMS",
    "Credit",
    "assign_credit",
    "spread_over_turns",
    "turn_means",
    "turn_rewards_on_tokens",
]


@dataclass(frozen=True)
class Credit:
    """Credit of one batch, one entry per trajectory (in the input order).

    Attributes:
        advantages: for the update: a number (broadcast to the trajectory's trained tokens) or a
            token-aligned list of length T. None for methods whose advantages the update
            computes itself (``ppo``: GAE from the value head).
        turn: per-turn advantages for the credit view (empty lists until the update fills them
            for ``ppo``).
        outcome: the trajectory-level advantage where the method has one, else None.
        token_rewards: token-aligned rewards for the critic (``ppo`` only).
    """

    advantages: list[float | list[float]] | None
    turn: list[list[float]]
    outcome: list[float | None]
    token_rewards: list[list[float]] | None = None


def spread_over_turns(traj: Trajectory, per_turn: Sequence[float]) -> list[float]:
    """Token-aligned list: every sampled token of turn k gets ``per_turn[k]``, other tokens 0."""
    index = token_turn_index(traj)
    return [float(per_turn[k]) if k >= 0 and m else 0.0 for k, m in zip(index, traj.loss_mask)]


def turn_rewards_on_tokens(traj: Trajectory, per_turn: Sequence[float]) -> list[float]:
    """Token-aligned rewards: ``per_turn[k]`` on the last trained token of turn k (or, if the
    turn sampled none, on the last trained token before it; dropped if there is none)."""
    out = [0.0] * len(traj.token_ids)
    trained = [i for i, m in enumerate(traj.loss_mask) if m and i > 0]
    end = 0
    for k, turn in enumerate(traj.turns):
        end += len(turn.token_ids)
        last = max((i for i in trained if i < end), default=None)
        if last is not None:
            out[last] += float(per_turn[k])
    return out


def turn_means(traj: Trajectory, token_advantages: Sequence[float]) -> list[float]:
    """Per-turn mean of token advantages over each turn's trained tokens (0 if it has none)."""
    sums = [0.0] * len(traj.turns)
    counts = [0] * len(traj.turns)
    for i, (k, m) in enumerate(zip(token_turn_index(traj), traj.loss_mask)):
        if k >= 0 and m and i > 0:
            sums[k] += token_advantages[i]
            counts[k] += 1
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]


def _rewards(trajs: Sequence[Trajectory]) -> torch.Tensor:
    return torch.tensor([float(t.reward) for t in trajs], dtype=torch.float64)


def _outcome_credit(trajs: Sequence[Trajectory], values: torch.Tensor) -> Credit:
    adv = [float(a) for a in values.tolist()]
    return Credit(adv, [[a] * len(t.turns) for t, a in zip(trajs, adv)], list(adv))


def _grpo(trajs, cfg: AlgorithmConfig) -> Credit:
    gids = [t.group_id for t in trajs]
    return _outcome_credit(
        trajs, grpo_advantages(_rewards(trajs), gids, eps=cfg.std_eps, std_scope=cfg.std_scope)
    )


def _dr_grpo(trajs, cfg: AlgorithmConfig) -> Credit:
    return _outcome_credit(trajs, dr_grpo_advantages(_rewards(trajs), [t.group_id for t in trajs]))


def _rloo(trajs, cfg: AlgorithmConfig) -> Credit:
    return _outcome_credit(trajs, rloo_advantages(_rewards(trajs), [t.group_id for t in trajs]))


def _from_turns(
    trajs: Sequence[Trajectory], turn_adv: torch.Tensor, outcome: list[float | None]
) -> Credit:
    turns = [turn_adv[i, : len(t.turns)].tolist() for i, t in enumerate(trajs)]
    return Credit([spread_over_turns(t, a) for t, a in zip(trajs, turns)], turns, outcome)


def _reinforce_pp(trajs, cfg: AlgorithmConfig) -> Credit:
    width = max(len(t.token_ids) for t in trajs)
    mask = torch.zeros((len(trajs), width), dtype=torch.bool)
    for i, t in enumerate(trajs):
        mask[i, 1 : len(t.loss_mask)] = torch.tensor(t.loss_mask[1:], dtype=torch.bool)
    rows = [i for i in range(len(trajs)) if bool(mask[i].any())]
    tokens = torch.zeros(mask.shape, dtype=torch.float64)
    if rows:
        sub = [trajs[i] for i in rows]
        tokens[rows] = reinforce_pp_advantages(
            _rewards(sub), mask[rows], group_ids=[t.group_id for t in sub], gamma=cfg.gamma
        ).double()
    adv = [tokens[i, : len(t.token_ids)].tolist() for i, t in enumerate(trajs)]
    return Credit(adv, [turn_means(t, a) for t, a in zip(trajs, adv)], [None] * len(trajs))


def _ppo(trajs, cfg: AlgorithmConfig) -> Credit:
    rewards = [turn_rewards_on_tokens(t, turn_rewards(t)) for t in trajs]
    return Credit(None, [[] for _ in trajs], [None] * len(trajs), rewards)


def _gigpo(trajs, cfg: AlgorithmConfig) -> Credit:
    gids = [t.group_id for t in trajs]
    step_rewards, mask = pad_turns([turn_rewards(t) for t in trajs])
    adv = gigpo_advantages(
        _rewards(trajs),
        gids,
        step_rewards,
        mask,
        [anchor_keys(t) for t in trajs],
        gamma=cfg.gamma,
        step_weight=cfg.gigpo_step_weight,
        eps=cfg.std_eps,
    )
    episode = grpo_advantages(_rewards(trajs), gids, eps=cfg.std_eps).tolist()
    return _from_turns(trajs, adv, episode)


def _turn_grpo(trajs, cfg: AlgorithmConfig) -> Credit:
    gids = [t.group_id for t in trajs]
    process, mask = pad_turns([turn_process_rewards(t) for t in trajs])
    adv = turn_process_advantages(
        _rewards(trajs),
        gids,
        process,
        mask,
        gamma=cfg.gamma,
        process_coef=cfg.process_coef,
        eps=cfg.std_eps,
    )
    outcome = grpo_advantages(_rewards(trajs), gids, eps=cfg.std_eps).tolist()
    return _from_turns(trajs, adv, outcome)


#: ``algorithm.name`` → credit function ``f(trajectories, algorithm config) -> Credit``
ALGORITHMS: dict[str, Callable[[Sequence[Trajectory], AlgorithmConfig], Credit]] = {
    "grpo": _grpo,
    "dr_grpo": _dr_grpo,
    "rloo": _rloo,
    "reinforce_pp": _reinforce_pp,
    "ppo": _ppo,
    "gigpo": _gigpo,
    "turn_grpo": _turn_grpo,
}

#: methods that train a value head
CRITIC_ALGORITHMS = frozenset({"ppo"})


def assign_credit(trajectories: Sequence[Trajectory], cfg: AlgorithmConfig) -> Credit:
    """Credit of one RL step's scored, non-failed trajectories under ``cfg.name``.

    Raises:
        KeyError: unknown ``cfg.name`` (the message lists the known names).
        ValueError: an unscored trajectory, or one without turns (methods that read turns).
    """
    try:
        fn = ALGORITHMS[cfg.name]
    except KeyError:
        raise KeyError(
            f"unknown algorithm {cfg.name!r}; known: {', '.join(sorted(ALGORITHMS))}"
        ) from None
    if not trajectories:
        return Credit(
            [] if cfg.name not in CRITIC_ALGORITHMS else None,
            [],
            [],
            [] if cfg.name in CRITIC_ALGORITHMS else None,
        )
    return fn(trajectories, cfg)
