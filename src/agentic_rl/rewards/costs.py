"""The cost components the built-in envs share, defined once with their weights.

Every env charges the tokens its policy sampled, and the tool envs each tool call, with the same
component names and weights (w_f, before the cost group's λ_c): an env's rubric lists
``token_cost()`` and ``tool_call_cost()`` instead of writing the :class:`RewardFunction` again.

==================  =====================================  ==========================
component           value                                  weight
==================  =====================================  ==========================
generated_tokens    tokens the policy sampled              :data:`TOKEN_COST`
tool_calls          tool calls (accepted + rejected)       :data:`TOOL_CALL_COST`
==================  =====================================  ==========================
"""

from __future__ import annotations

from agentic_rl.rewards.components import generated_tokens, num_tool_calls
from agentic_rl.rewards.rubric import RewardFunction, RewardGroup

__all__ = ["TOKEN_COST", "TOOL_CALL_COST", "token_cost", "tool_call_cost"]

#: weight of each sampled token (200 tokens cost 0.1 before λ_c)
TOKEN_COST = 0.0005
#: weight of each tool call of the tool envs
TOOL_CALL_COST = 0.02


def token_cost(weight: float = TOKEN_COST) -> RewardFunction:
    """The ``generated_tokens`` cost component (tokens the policy sampled). Never raises."""
    return RewardFunction("generated_tokens", RewardGroup.COST, generated_tokens, weight=weight)


def tool_call_cost(weight: float = TOOL_CALL_COST, name: str = "tool_calls") -> RewardFunction:
    """The tool-call cost component: ``num_tool_calls`` (accepted + rejected calls), logged as
    ``reward/<name>``. Never raises."""
    return RewardFunction(name, RewardGroup.COST, num_tool_calls, weight=weight)
