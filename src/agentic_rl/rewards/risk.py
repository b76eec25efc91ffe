"""Built-in risk components (the C_risk group of the rubric).

Environments that route tools through :class:`~agentic_rl.tools.governance.executor.ToolExecutor`
put the turn's risk events on the step's observation, ``Observation.risk_events`` (the rollout
copies them to ``Turn.risk_events``): :class:`~agentic_rl.types.RiskEvent` values
(``denied`` True on a refused call).
The components count them over the whole trajectory (amounts >= 0, subtracted by the rubric):

=============================  ==========================================================
component                      counts
=============================  ==========================================================
``denied_calls``               events with ``denied`` true (any reason the policy refused)
``sandbox_limit_hits``         events of category ``"sandbox_limit"`` (timeout, memory, ...)
``outside_workspace_attempts`` events of category ``"path_outside_workspace"``
=============================  ==========================================================

Environments that offer the sandbox's tools get ``sandbox_limit`` and ``path_outside_workspace``
events automatically: the tools of :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox` carry their
risk detectors, which the executor runs after each allowed call. Which limits count, and which
paths are "outside", is listed in :mod:`agentic_rl.tools.governance.risk_detector`.

A call denied for touching a path outside the workspace (a path rule of the permission policy)
is one event, ``denied`` and of category ``path_outside_workspace``: it counts in both
``denied_calls`` and ``outside_workspace_attempts``, because it is both. An *allowed* file-tool
call with such a path (the workspace tool then refuses it) counts in
``outside_workspace_attempts`` only. Each component has its own weight and is logged
like every rubric component (``reward/<name>``).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentic_rl.rewards.rubric import RewardFunction, RewardGroup
from agentic_rl.tools.governance.risk_detector import PATH_OUTSIDE_WORKSPACE, SANDBOX_LIMIT
from agentic_rl.types import RiskEvent, Trajectory

__all__ = [
    "risk_events",
    "denied_calls",
    "sandbox_limit_hits",
    "outside_workspace_attempts",
    "risk_functions",
    "SANDBOX_LIMIT",
    "PATH_OUTSIDE_WORKSPACE",
]


def risk_events(trajectory: Trajectory) -> Iterator[RiskEvent]:
    """All risk events of the trajectory (``Turn.risk_events``), turn by turn.

    Raises:
        TypeError: a turn's ``risk_events`` holds something other than ``RiskEvent`` values (a
            broken env must fail the trajectory loudly, not score 0).
    """
    for turn in trajectory.turns:
        if not all(isinstance(e, RiskEvent) for e in turn.risk_events):
            raise TypeError(
                f"turn {turn.index}: risk_events must be RiskEvent values, got {turn.risk_events!r}"
            )
        yield from turn.risk_events


def denied_calls(trajectory: Trajectory) -> float:
    """Number of tool calls the permission policy refused (a risk). Raises as :func:`risk_events`."""
    return float(sum(e.denied for e in risk_events(trajectory)))


def sandbox_limit_hits(trajectory: Trajectory) -> float:
    """Number of sandbox limit hits (timeout, memory, processes, ...). Raises as :func:`risk_events`."""
    return float(sum(e.category == SANDBOX_LIMIT for e in risk_events(trajectory)))


def outside_workspace_attempts(trajectory: Trajectory) -> float:
    """Number of attempts to touch a path outside the workspace. Raises as :func:`risk_events`."""
    return float(sum(e.category == PATH_OUTSIDE_WORKSPACE for e in risk_events(trajectory)))


def risk_functions(
    denied: float = 0.5, sandbox_limit: float = 0.1, outside_workspace: float = 0.5
) -> list[RewardFunction]:
    """The three built-in risk components with their weights (w_f), ready for a Rubric.

    Never raises.
    """
    return [
        RewardFunction("denied_calls", RewardGroup.RISK, denied_calls, weight=denied),
        RewardFunction(
            "sandbox_limit_hits", RewardGroup.RISK, sandbox_limit_hits, weight=sandbox_limit
        ),
        RewardFunction(
            "outside_workspace_attempts",
            RewardGroup.RISK,
            outside_workspace_attempts,
            weight=outside_workspace,
        ),
    ]
