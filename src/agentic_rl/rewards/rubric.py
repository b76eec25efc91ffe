"""Rubrics: rewards as a weighted sum of named components in four groups.

Formula (DESIGN.md, decision 3)::

    R = λ_o · Σ_{f ∈ outcome} w_f·f(τ) + λ_p · Σ_{f ∈ process} w_f·f(τ)
        − λ_c · Σ_{f ∈ cost} w_f·f(τ) − λ_r · Σ_{f ∈ risk} w_f·f(τ)

Each reward function maps a finished :class:`~agentic_rl.types.Trajectory` to a float. Cost and
risk functions return non-negative amounts that are *subtracted*. The raw value of every
function, and the weighted total of every group, are stored on the trajectory and logged; a
function with weight 0 is a logged metric that does not change the reward (as in the
``verifiers`` library's zero-weight rubric functions).

A reward function that raises or returns a non-finite value marks the trajectory as failed
(``Trajectory.failure``) and it is excluded from training loudly; it never becomes a silent 0.

Batched components. A function may also have a ``prefetch(trajectories)`` hook that
:meth:`Rubric.apply_batch` calls once with the whole batch before scoring each trajectory, so an
expensive component (an LLM judge, :mod:`agentic_rl.rewards.judge`) sends its requests together
or concurrently and ``fn`` then reads its result.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentic_rl.types import Trajectory

log = logging.getLogger(__name__)


class RewardGroup(str, enum.Enum):
    """The four groups of the hybrid reward; COST and RISK are subtracted."""

    OUTCOME = "outcome"
    PROCESS = "process"
    COST = "cost"
    RISK = "risk"

    @property
    def sign(self) -> float:
        """+1 for outcome/process, −1 for cost/risk."""
        return 1.0 if self in (RewardGroup.OUTCOME, RewardGroup.PROCESS) else -1.0


@dataclass(frozen=True)
class RewardFunction:
    """A named reward component.

    Attributes:
        name: component name, unique in a rubric (used in logs: ``reward/<name>``).
        group: which of the four groups it belongs to.
        fn: ``fn(trajectory) -> float``; cost/risk functions return amounts >= 0.
        weight: w_f in the formula above; 0 makes it a logged-only metric.
        prefetch: optional ``prefetch(trajectories) -> None`` called once per batch by
            :meth:`Rubric.apply_batch` before ``fn`` runs on each trajectory (batched judge
            calls); it records per-trajectory failures for ``fn`` to raise, and raises itself
            only when the whole batch failed.
    """

    name: str
    group: RewardGroup
    fn: Callable[[Trajectory], float]
    weight: float = 1.0
    prefetch: Callable[[Sequence[Trajectory]], None] | None = None


@dataclass(frozen=True)
class RewardWeights:
    """Group weights λ_o, λ_p, λ_c, λ_r (config section ``[reward]``)."""

    outcome: float = 1.0
    process: float = 0.1
    cost: float = 1.0
    risk: float = 1.0

    def of(self, group: RewardGroup) -> float:
        """λ of one group."""
        return getattr(self, group.value)


class RewardError(RuntimeError):
    """A reward function raised or returned a non-finite value."""


class Rubric:
    """A set of reward functions combined with group weights.

    Args:
        functions: the components; names must be unique.
        weights: the group weights λ.

    Raises:
        ValueError: duplicate component names.
    """

    def __init__(
        self, functions: Sequence[RewardFunction], weights: RewardWeights = RewardWeights()
    ):
        names = [f.name for f in functions]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate reward function names: {names}")
        if set(names) & {g.value for g in RewardGroup}:
            raise ValueError(f"reward function names may not be group names: {names}")
        self.functions = tuple(functions)
        self.weights = weights

    def score(self, trajectory: Trajectory) -> tuple[float, dict[str, float]]:
        """Compute the total reward and the components of one trajectory.

        Returns:
            ``(total, components)`` where components holds each function's raw value under its
            name and each group's weighted sum (before λ and sign) under the group's name.

        Raises:
            RewardError: a reward function raised or returned NaN/inf.
        """
        components: dict[str, float] = {g.value: 0.0 for g in RewardGroup}
        for f in self.functions:
            try:
                value = float(f.fn(trajectory))
            except Exception as exc:  # noqa: BLE001 - any failure must exclude the sample
                raise RewardError(
                    f"reward function {f.name!r} raised {type(exc).__name__}: {exc}"
                ) from exc
            if not math.isfinite(value):
                raise RewardError(f"reward function {f.name!r} returned {value}")
            components[f.name] = value
            components[f.group.value] += f.weight * value
        total = sum(g.sign * self.weights.of(g) * components[g.value] for g in RewardGroup)
        return total, components

    def apply(self, trajectory: Trajectory) -> Trajectory:
        """Return the trajectory with ``reward`` and ``reward_components`` filled in.

        A failing reward function does not raise: the returned trajectory has ``reward=None``
        and ``failure`` set, so it is excluded from training, and an error is logged.
        """
        try:
            total, components = self.score(trajectory)
        except RewardError as exc:
            log.error("trajectory %s excluded: %s", trajectory.trajectory_id, exc)
            return dataclasses.replace(
                trajectory, reward=None, reward_components={}, failure=str(exc)
            )
        return dataclasses.replace(trajectory, reward=total, reward_components=components)

    def apply_batch(self, trajectories: Sequence[Trajectory]) -> list[Trajectory]:
        """:meth:`apply` on each trajectory, after every function's ``prefetch`` saw the batch.

        A ``prefetch`` that raises excludes the whole batch (``reward=None``, ``failure`` set,
        an error logged); failures of single trajectories surface from ``fn`` as in :meth:`apply`.
        """
        for f in self.functions:
            if f.prefetch is None:
                continue
            try:
                f.prefetch(trajectories)
            except Exception as exc:  # noqa: BLE001 - the whole batch is excluded, loudly
                why = f"reward function {f.name!r} failed on the batch: {type(exc).__name__}: {exc}"
                log.error("%d trajectories excluded: %s", len(trajectories), why)
                return [
                    dataclasses.replace(t, reward=None, reward_components={}, failure=why)
                    for t in trajectories
                ]
        return [self.apply(t) for t in trajectories]
