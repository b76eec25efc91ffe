"""The reward an agent reports for a rollout: a number, or named components in the rubric's groups.

What an agent posts to ``/rollouts/<id>/reward`` (or returns from its function, or what the
``agent.reward`` callback returns) is read by :func:`parse_reward`:

* a number ``r`` (or ``{"reward": r}``): the outcome, so R = λ_o·r, and the rollout counts as a
  success when r >= 1 (:func:`~agentic_rl.trainer.evaluation.held_out.is_success`);
* ``{"components": {"correct": 1.0, "format": 1.0, "calls": 3}, "groups": {"format":
  "process", "calls": "cost"}}``: named components, each in one of the four groups of the
  rubric (``outcome`` when not named in ``groups``), combined as a
  :class:`~agentic_rl.rewards.rubric.Rubric` does (docs/design.md, decision 3)::

      R = λ_o·Σ outcome + λ_p·Σ process − λ_c·Σ cost − λ_r·Σ risk

  with the run's ``[reward]`` weights; the trajectory keeps every component and each group's sum.

Optional keys: ``choice`` (which choice of the last call with ``n`` > 1 ends the trajectory,
default 0) and ``info`` (a JSON object merged into ``Trajectory.info``, e.g. ``{"level":
"hard"}`` for per-level metrics). Anything else, a non-finite value or a component named like a
group is a :class:`RewardFormatError` (the server answers 400; a callback's becomes the
rollout's failure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.rewards.rubric import RewardGroup, RewardWeights

__all__ = ["ReportedReward", "RewardFormatError", "parse_reward"]

_GROUPS = {g.value: g for g in RewardGroup}
_KEYS = {"reward", "components", "groups", "choice", "info"}


class RewardFormatError(ValueError):
    """A reported reward that :func:`parse_reward` cannot read (the message says why)."""


@dataclass(frozen=True)
class ReportedReward:
    """A parsed reward.

    Attributes:
        total: R of the module docstring.
        components: every named value and each group's sum (before λ and sign).
        choice: the last call's choice that ends the trajectory.
        info: metadata for ``Trajectory.info``.
    """

    total: float
    components: dict[str, float]
    choice: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RewardFormatError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise RewardFormatError(f"{name} must be finite, got {value!r}")
    return float(value)


def parse_reward(value: Any, weights: RewardWeights = RewardWeights()) -> ReportedReward:
    """The :class:`ReportedReward` of a reported value (module docstring).

    Raises:
        RewardFormatError: the value has none of the accepted shapes.
    """
    if not isinstance(value, dict):
        value = {"reward": value}
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise RewardFormatError(f"unknown key(s) {unknown}; expected {sorted(_KEYS)}")
    if ("reward" in value) == ("components" in value):
        raise RewardFormatError("give either 'reward' (a number) or 'components' (an object)")
    choice = value.get("choice", 0)
    if isinstance(choice, bool) or not isinstance(choice, int) or choice < 0:
        raise RewardFormatError(f"choice must be an int >= 0, got {choice!r}")
    info = value.get("info", {})
    if not isinstance(info, dict):
        raise RewardFormatError(f"info must be an object, got {info!r}")
    named = (
        {"reward": _finite("reward", value["reward"])} if "reward" in value else value["components"]
    )
    groups = value.get("groups", {})
    if not isinstance(named, dict) or not named or not isinstance(groups, dict):
        raise RewardFormatError("components must be a non-empty object, groups an object")
    sums = {g: 0.0 for g in _GROUPS}
    components: dict[str, float] = {}
    for name, raw in named.items():
        if name in _GROUPS:
            raise RewardFormatError(f"component {name!r} is named like a group; rename it")
        group = groups.get(name, "outcome")
        if group not in _GROUPS:
            raise RewardFormatError(f"groups.{name} must be one of {sorted(_GROUPS)}")
        components[name] = _finite(f"components.{name}", raw)
        sums[group] += components[name]
    if set(groups) - set(named):
        raise RewardFormatError(
            f"groups name unknown components {sorted(set(groups) - set(named))}"
        )
    total = sum(g.sign * weights.of(g) * sums[g.value] for g in RewardGroup)
    return ReportedReward(total, {**components, **sums}, choice, dict(info))
