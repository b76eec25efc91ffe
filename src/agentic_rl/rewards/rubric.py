"""Rubrics: rewards as a weighted sum of named components in four groups.

Formula (docs/design.md, decision 3)::

    R = λ_o · Σ_{f ∈ outcome} w_f·f(τ) + λ_p · Σ_{f ∈ process} w_f·f(τ)
        − λ_c · Σ_{f ∈ cost} w_f·f(τ) − λ_r · Σ_{f ∈ risk} w_f·f(τ)

Each reward function maps a finished :class:`~agentic_rl.types.Trajectory` to a float. Cost and
risk functions return non-negative amounts that are *subtracted*. The raw value of every
function, and the weighted total of every group, are stored on the trajectory and logged; a
function with weight 0 is a logged metric that does not change the reward (as in the
``verifiers`` library's zero-weight rubric functions).

A reward function that raises, returns a non-finite value or runs past its time limit marks the
trajectory as failed (``Trajectory.failure``) and it is excluded from training loudly (an error
logged, counted in ``rollout/failed``); it never becomes a silent 0.

Time limit. Every call of a reward function has one: ``RewardFunction.timeout_s``, else the
rubric's ``[reward] timeout_s`` (:class:`RewardWeights`, 60 s by default). A call runs in a
thread the caller stops waiting for at the limit, or, for a function marked
``thread_safe=False``, in a forked child that is killed at the limit
(:mod:`agentic_rl.rewards.deadline`). ``prefetch`` hooks are not limited here: the one built in,
the LLM judge's, bounds each request itself (``timeout_s`` of :mod:`agentic_rl.rewards.judge`).

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

from agentic_rl.rewards.deadline import ChildCallError, RewardTimeout, call_with_deadline
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
        timeout_s: seconds one call of ``fn`` may take (> 0); None = the rubric's
            ``RewardWeights.timeout_s``. Past it the trajectory fails (module docstring).
        thread_safe: False runs each call in a forked child killed at the time limit, for a
            function that must not run twice at once or may hold the GIL while it hangs
            (:mod:`agentic_rl.rewards.deadline`).
    """

    name: str
    group: RewardGroup
    fn: Callable[[Trajectory], float]
    weight: float = 1.0
    prefetch: Callable[[Sequence[Trajectory]], None] | None = None
    timeout_s: float | None = None
    thread_safe: bool = True

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            raise ValueError(
                f"reward function {self.name!r}: timeout_s must be > 0 and finite, got "
                f"{self.timeout_s!r}"
            )


@dataclass(frozen=True)
class RewardWeights:
    """Config section ``[reward]``: the group weights λ_o, λ_p, λ_c, λ_r, and ``timeout_s``, the
    seconds one call of a reward function may take (> 0, finite; a function's own
    ``RewardFunction.timeout_s`` wins). Past it the trajectory fails, loudly (module docstring).

    Raises:
        ValueError: ``timeout_s`` is not > 0 and finite (names the key).
    """

    outcome: float = 1.0
    process: float = 0.1
    cost: float = 1.0
    risk: float = 1.0
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s < math.inf:
            raise ValueError(
                f"key 'reward.timeout_s' must be > 0 and finite, got {self.timeout_s!r}"
            )

    def of(self, group: RewardGroup) -> float:
        """λ of one group."""
        return getattr(self, group.value)


class RewardError(RuntimeError):
    """A reward function raised, returned a non-finite value, or ran past its time limit."""


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
            RewardError: a reward function raised, returned NaN/inf, or ran past its time
                limit (each call: ``f.timeout_s``, else ``weights.timeout_s``).
        """
        components: dict[str, float] = {g.value: 0.0 for g in RewardGroup}
        for f in self.functions:
            limit = self.weights.timeout_s if f.timeout_s is None else f.timeout_s
            try:
                value = float(
                    call_with_deadline(
                        f.fn, trajectory, limit, name=f.name, thread_safe=f.thread_safe
                    )
                )
            except RewardTimeout as exc:
                raise RewardError(f"reward function {f.name!r} {exc}") from exc
            except ChildCallError as exc:  # raised in its own process
                raise RewardError(f"reward function {f.name!r} raised {exc}") from exc
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
