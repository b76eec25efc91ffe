"""What an RL step trains on: a difficulty-aware task pool and dynamic sampling with refill.

Task pool (curriculum over levels). Each RL step draws fresh task seeds from a seeded stream
(``config.seed`` sets the order). With ``sampling.task_sampling = "difficulty"`` a candidate
seed of level ℓ is accepted with probability w_ℓ / max_ℓ' w_ℓ', where

    p̂_ℓ = (s_ℓ + 1) / (n_ℓ + 2)          (Laplace estimate of the level's rollout success)
    w_ℓ = p̂_ℓ · (1 − p̂_ℓ) + floor

and s_ℓ, n_ℓ are exponentially decayed counts of successful and sampled rollouts of level ℓ.
p(1 − p) is the variance of a Bernoulli reward, i.e. how much a group of that level is expected
to teach under a group baseline: levels that are always or never solved are sampled less, but
never never (``floor``). This is the variance-based prioritisation of curriculum methods for
RL on LLMs (e.g. "learnability" p(1 − p), Tzannetos et al. 2023; Foster & Foerster 2025); the
level is read from the env's reset ``info["level"]`` (an env without levels is one level, so
the pool is uniform for it).

Dynamic sampling (DAPO, Yu et al. 2025, arXiv:2503.14476, §3.2). A group whose G rollouts all
have the same outcome has zero group-relative advantage and teaches nothing. With
``sampling.dynamic_sampling`` the step samples rounds of ``rollout_tasks`` tasks, keeps the
groups whose outcomes differ, and samples further rounds until ``tasks_per_step`` informative
groups are collected or ``max_sample_rounds`` rounds ran (then it trains on what it has and
counts the shortfall). Deviation from DAPO: the filter reads the outcome group of the rubric
(``reward_components["outcome"]``), not the total reward, so that cost terms (a few tokens
more or less) do not make a group look informative.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentic_rl.types import Trajectory

#: seeds of RL tasks are drawn from [train_seed_start, train_seed_start + TRAIN_SEED_SPAN): below the
#: warm-up (500,000+) and held-out (1,000,000+) seeds of the default config
TRAIN_SEED_SPAN = 400_000


class TaskSource(Protocol):
    """Where an RL step's task seeds come from: a :class:`TaskPool`, or a mixture's
    :class:`~agentic_rl.trainer.sampling.mixture.MixturePool` (whose tasks are (env, seed) pairs).
    ``Run.task_pool`` is typed by this, so the run imports no mixture code."""

    def draw(self, n: int, exclude: Sequence[Any] = ()) -> list[Any]:
        """``n`` distinct tasks not in ``exclude``."""
        ...

    def update(
        self, trajectories: Sequence[Trajectory], is_success: Callable[[Trajectory], bool]
    ) -> None:
        """Learn from a round's rollouts (difficulty weights, reward moments)."""
        ...

    def state(self) -> dict:
        """JSON-serialisable state for checkpoints."""
        ...

    def load_state(self, state: dict) -> None:
        """Restore what :meth:`state` returned."""
        ...


@dataclass
class TaskPool:
    """Seeded task stream with difficulty-aware acceptance (module docstring).

    Args:
        seed: the run's seed (sets the order of candidate task seeds).
        seed_start: first task seed; candidates lie in ``[seed_start, seed_start + span)``.
        difficulty: accept candidates by level weight (else every candidate is accepted).
        level_of: the level of a task seed (e.g. read from ``env.reset(seed)[1]["level"]``).
        decay: factor applied to the level counts before each update (1 = no forgetting).
        floor: the weight every level keeps.
        span: size of the seed range.

    Raises:
        ValueError: ``decay`` outside (0, 1], ``floor`` <= 0 or ``span`` < 1.
    """

    seed: int
    seed_start: int
    difficulty: bool
    level_of: Callable[[int], str]
    decay: float = 0.8
    floor: float = 0.05
    span: int = TRAIN_SEED_SPAN
    counts: dict[str, list[float]] = field(default_factory=dict)  # level -> [successes, rollouts]
    draws: int = 0  # candidates drawn so far (the position in the stream)
    # async training draws and updates in the producer thread while checkpoints read the state
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.decay <= 1.0 or self.floor <= 0.0 or self.span < 1:
            raise ValueError(
                f"TaskPool: need 0 < decay <= 1, floor > 0, span >= 1; got {self.decay}, "
                f"{self.floor}, {self.span}"
            )

    def _candidate(self) -> tuple[int, float]:
        """The next candidate seed of the stream and its acceptance draw u ~ U[0, 1)."""
        rng = random.Random(f"task-pool/{self.seed}/{self.draws}")
        self.draws += 1
        return self.seed_start + rng.randrange(self.span), rng.random()

    def weight(self, level: str) -> float:
        """w_ℓ = p̂(1 − p̂) + floor with the Laplace estimate p̂ of the level's success."""
        s, n = self.counts.get(level, (0.0, 0.0))
        p = (s + 1.0) / (n + 2.0)
        return p * (1.0 - p) + self.floor

    def acceptance(self, level: str) -> float:
        """Probability of accepting a candidate of ``level``: w_ℓ / max w over known levels and ℓ."""
        if not self.difficulty:
            return 1.0
        top = max([self.weight(lv) for lv in self.counts] + [self.weight(level)])
        return self.weight(level) / top

    def draw(self, n: int, exclude: Sequence[int] = ()) -> list[int]:
        """The next ``n`` accepted task seeds (distinct, none in ``exclude``).

        Raises:
            ValueError: ``n`` < 0.
        """
        if n < 0:
            raise ValueError(f"TaskPool.draw: n must be >= 0, got {n}")
        with self.lock:
            return self._draw(n, exclude)

    def _draw(self, n: int, exclude: Sequence[int]) -> list[int]:
        taken = set(exclude)
        out: list[int] = []
        while len(out) < n:
            seed, u = self._candidate()
            if seed in taken:
                continue
            if not self.difficulty or u < self.acceptance(self.level_of(seed)):
                out.append(seed)
                taken.add(seed)
        return out

    def update(
        self, trajectories: Sequence[Trajectory], is_success: Callable[[Trajectory], bool]
    ) -> None:
        """Decay the counts, then add each rollout's success to its level (``Trajectory.level``)."""
        with self.lock:
            self._update(trajectories, is_success)

    def _update(self, trajectories, is_success) -> None:
        for c in self.counts.values():
            c[0] *= self.decay
            c[1] *= self.decay
        for t in trajectories:
            c = self.counts.setdefault(t.level or "", [0.0, 0.0])
            c[0] += float(is_success(t) and not t.failed)
            c[1] += 1.0

    def state(self) -> dict:
        """JSON-serialisable state for checkpoints (:meth:`load_state`)."""
        with self.lock:
            return {
                "counts": {k: list(v) for k, v in self.counts.items()},
                "draws": self.draws,
            }

    def load_state(self, state: dict) -> None:
        """Restore what :meth:`state` returned."""
        self.counts = {k: [float(x) for x in v] for k, v in state.get("counts", {}).items()}
        self.draws = int(state.get("draws", 0))


def group_outcomes(trajectories: Sequence[Trajectory]) -> dict[str, list[float]]:
    """Outcome group value (``reward_components["outcome"]``) of each scored rollout, per group id.

    Failed (unscored) rollouts are left out.
    """
    out: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        if not t.failed:
            out[t.group_id].append(float(t.reward_components.get("outcome", 0.0)))
    return dict(out)


def informative_groups(trajectories: Sequence[Trajectory], tol: float = 1e-9) -> list[str]:
    """Group ids, in first-seen order, whose scored rollouts' outcomes differ by more than ``tol``
    (at least two scored rollouts); the groups DAPO's dynamic sampling keeps."""
    outcomes = group_outcomes(trajectories)
    seen: list[str] = []
    for t in trajectories:
        if t.group_id not in seen:
            seen.append(t.group_id)
    return [
        g
        for g in seen
        if len(outcomes.get(g, ())) >= 2 and max(outcomes[g]) - min(outcomes[g]) > tol
    ]


@dataclass(frozen=True)
class SampledBatch:
    """The rollouts of one RL step after dynamic sampling.

    Attributes:
        train: the rollouts of the groups kept for the update (all rollouts of the first round
            when dynamic sampling is off).
        dropped: every other rollout sampled this step (uninformative or surplus groups).
        rounds: sampling rounds run (>= 1).
        groups_sampled: groups sampled over all rounds.
        groups_informative: of those, groups whose outcomes differed.
        stale: rollouts moved from ``train`` to ``dropped`` because they were too many policy
            versions old when the trainer took the batch (async training).
    """

    train: list[Trajectory]
    dropped: list[Trajectory]
    rounds: int
    groups_sampled: int
    groups_informative: int
    stale: int = 0

    @property
    def all(self) -> list[Trajectory]:
        """Every rollout of the step (kept first)."""
        return self.train + self.dropped


def sample_with_refill(
    rollout: Callable[[int], list[Trajectory]],
    *,
    groups_needed: int,
    max_rounds: int,
    dynamic: bool,
) -> SampledBatch:
    """Collect ``groups_needed`` informative groups (DAPO's dynamic sampling with refill).

    Args:
        rollout: ``rollout(round_index)`` samples and scores one round of groups (new tasks each
            round) and returns its trajectories.
        groups_needed: informative groups wanted (``tasks_per_step``); surplus ones are dropped.
        max_rounds: cap on rounds (>= 1); at the cap the batch keeps the groups it found.
        dynamic: False = one round, every group kept (no filtering).

    Returns:
        a :class:`SampledBatch`; ``train`` holds whole groups in the order they were sampled.

    Raises:
        ValueError: ``groups_needed`` < 1 or ``max_rounds`` < 1.
    """
    if groups_needed < 1 or max_rounds < 1:
        raise ValueError(
            f"sample_with_refill: groups_needed and max_rounds must be >= 1, got "
            f"{groups_needed}, {max_rounds}"
        )
    train: list[Trajectory] = []
    dropped: list[Trajectory] = []
    kept: list[str] = []
    sampled = informative = rounds = 0
    while rounds < (max_rounds if dynamic else 1) and len(kept) < groups_needed:
        batch = rollout(rounds)
        rounds += 1
        groups = list(dict.fromkeys(t.group_id for t in batch))
        sampled += len(groups)
        differing = informative_groups(batch)
        informative += len(differing)
        good = differing if dynamic else groups
        take = set(good[: groups_needed - len(kept)]) if dynamic else set(groups)
        kept += [g for g in groups if g in take]
        train += [t for t in batch if t.group_id in take]
        dropped += [t for t in batch if t.group_id not in take]
    return SampledBatch(train, dropped, rounds, sampled, informative)
