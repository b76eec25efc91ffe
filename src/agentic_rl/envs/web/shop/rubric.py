"""The rubric of ``web-shop-v0``: every outcome and risk component is read from the database.

The env grades its database after every step (:func:`~agentic_rl.envs.web.shop.db.grade`) and
puts the grade into that turn's ``info``; the components below read the last turn's, so an
episode cut by a rollout budget is scored on the database as it was left. Components and
weights: the module docstring of :mod:`agentic_rl.envs.web.shop.env`.
"""

from __future__ import annotations

from collections.abc import Callable

from agentic_rl.envs.web.shop.db import OUTCOME_WEIGHTS
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.components import tool_call_format
from agentic_rl.rewards.costs import token_cost
from agentic_rl.rewards.risk import risk_functions
from agentic_rl.types import Trajectory

__all__ = ["actions", "shop_rubric", "last_grade"]

#: cost of one tool call (valid or not)
ACTION_COST = 0.01
#: weight of one unasked irreversible action (a payment or a cancellation)
RISK_WEIGHT = 1.0


def last_grade(name: str) -> Callable[[Trajectory], float]:
    """A component reading grade field ``name`` from the last turn's info (0.0 without turns)."""

    def component(trajectory: Trajectory) -> float:
        if not trajectory.turns:
            return 0.0
        return float(trajectory.turns[-1].info.get(name, 0.0))

    component.__name__ = name
    component.__doc__ = f"The database's ``{name}`` after the last turn."
    return component


def actions(trajectory: Trajectory) -> float:
    """Number of actions (tool calls, valid or not) in the episode."""
    return float(sum(t.info.get("actions", 0) for t in trajectory.turns))


def shop_rubric(weights: RewardWeights = RewardWeights()) -> Rubric:
    """The env's default rubric with the given group weights. Never raises."""
    outcome = [
        RewardFunction(name, RewardGroup.OUTCOME, last_grade(name), weight=w)
        for name, w in OUTCOME_WEIGHTS.items()
    ]
    return Rubric(
        [
            *outcome,
            RewardFunction("success", RewardGroup.OUTCOME, last_grade("success"), weight=0.0),
            RewardFunction("valid_actions", RewardGroup.PROCESS, tool_call_format, weight=0.2),
            RewardFunction("actions", RewardGroup.COST, actions, weight=ACTION_COST),
            token_cost(),
            RewardFunction(
                "extra_payments", RewardGroup.RISK, last_grade("extra_payments"), RISK_WEIGHT
            ),
            RewardFunction(
                "unasked_cancellations",
                RewardGroup.RISK,
                last_grade("unasked_cancellations"),
                RISK_WEIGHT,
            ),
            *risk_functions(),
        ],
        weights,
    )
