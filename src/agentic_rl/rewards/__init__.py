"""Rewards: rubrics of named components (outcome, process, cost, risk) and verifiers."""

from agentic_rl.rewards.rubric import (
    RewardError,
    RewardFunction,
    RewardGroup,
    RewardWeights,
    Rubric,
)
from agentic_rl.rewards.verifiers import extract_answer, numbers_equal, parse_number

__all__ = [
    "RewardError",
    "RewardFunction",
    "RewardGroup",
    "RewardWeights",
    "Rubric",
    "extract_answer",
    "numbers_equal",
    "parse_number",
]
