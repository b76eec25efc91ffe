"""Training on a mixture of environments: the envs of a run, how tasks are drawn, reward scaling.

A run with ``[[env.mix]]`` entries (:mod:`agentic_rl.config.mixture`) trains one policy on
several envs. Its parts:

* **Envs** (:func:`env_slots`): one :class:`EnvSlot` per entry: the env id, its constructor
  arguments, its warm-up demonstrations and held-out size, its rollout budgets.
* **Groups are single-env.** An RL task is (env, seed); its G rollouts all play that task, so a
  group-relative baseline only ever compares rollouts of one env. Group ids carry the env
  (``rl-<step>-<env id>-<seed>``).
* **Task draws** (:class:`MixturePool`). Each sampling round of n tasks first draws the n tasks'
  envs by the normalised weights w_e = weight_e / Σ weight, with *systematic sampling*
  (Kitagawa 1996): one u ~ U[0, 1) from a stream seeded by the run's seed; task k gets the env
  whose cumulative-weight interval holds (u + k) / n; the n envs are then shuffled with the same
  stream. Each task's env is marginally distributed by the weights, and env e gets ⌊n·w_e⌋ or
  ⌈n·w_e⌉ of the n tasks (i.i.d. draws would let a small step miss an env). Each env then draws
  its tasks' seeds from its own :class:`~agentic_rl.trainer.sampling.task_pool.TaskPool` (``uniform`` or
  ``difficulty``: the level weights are learned per env, from that env's rollouts only; level
  names of different envs never mix) or, with ``sequential``, its next seeds
  ``env.train_seed_start + k``. Each env's pool has the run's seed, so it proposes the same
  candidate seeds as a single-env run of that env with that seed.
* **Warm-up**: each env's oracle demonstrations (seeds ``warmup.seed_start …``, its
  ``warmup_kwargs``, its budgets), ``warmup_demos`` of them, by default its share of
  ``warmup.num_demos`` by weight (largest remainders); the SFT batches shuffle the union.
* **Metrics**: ``rollout/success`` etc. pool every env's rollouts (without per-level keys, whose
  names are per env); ``rollout/<env id>/success``, ``…/reward_total``, ``…/reward/<c>``,
  ``…/success/<level>`` and ``…/episodes`` are each env's; the same under ``eval/`` for the
  held-out evaluation, where each env plays its own ``eval_size`` seeds ``eval.seed_start …``
  (the pooled ``eval/success`` is over all of them).
* **Off-policy guidance** acts per env: up to ``sampling.guidance_groups`` all-failed groups per
  sampling round *of each env* get that env's oracle episode.

Per-env reward normalisation (``env.reward_norm = "std"``; :class:`RewardNorm`). Group-relative
advantages already remove each group's mean, but envs may reward on different scales (a 0/1
outcome beside a graded score with process terms), and methods without a per-group std
(``dr_grpo``, ``rloo``, ``reinforce_pp``'s batch whitening, ``grpo`` with
``std_scope = "batch"``, ``ppo``'s critic) then weigh the envs by their reward scale. With
``std`` each env e keeps exponentially decayed moments of its rollouts' total rewards R: after
each sampling round (the policy's own scored rollouts, guided ones left out)
``n_e ← d·n_e + m``, ``s_e ← d·s_e + Σ R``, ``q_e ← d·q_e + Σ R²`` (d =
``env.reward_norm_decay``), σ_e = √max(q_e/n_e − (s_e/n_e)², 0); at credit assignment every
trajectory of env e (guided ones too) is scored with R / (σ_e + ε) (ε = ``env.reward_norm_eps``),
and each turn's reward likewise (so per-turn rewards still sum to the scaled total). No mean is
subtracted (group baselines do that). Only the credit sees the scaled rewards: the stored records,
the metrics and dynamic sampling's filter keep the rubric's. With ``grpo``'s per-group std the
scaling only changes how much ``algorithm.std_eps`` weighs against the group std. The σ_e used
are logged as ``reward_norm/<env id>/std``.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentic_rl.config import TrainConfig
from agentic_rl.errors import ConfigError
from agentic_rl.rollout import RolloutConfig
from agentic_rl.trainer.sampling.task_pool import TaskPool
from agentic_rl.types import Trajectory

if TYPE_CHECKING:
    from agentic_rl.trainer.run import Run

__all__ = [
    "EnvSlot",
    "MixTask",
    "MixturePool",
    "RewardNorm",
    "demo_shares",
    "env_slots",
    "is_mixture",
    "slot_base_kwargs",
    "slot_env_kwargs",
    "slot_of",
    "slot_replay_kwargs",
]


@dataclass(frozen=True, eq=False)
class EnvSlot:
    """One env of a mixture run, resolved from its ``[[env.mix]]`` entry and the run's config.

    Attributes:
        index: its entry's position in ``env.mix``. id: the env id.
        weight: its normalised weight (the weights sum to 1).
        kwargs: its constructor arguments (without the run's permissions, audit log or run id).
        warmup_kwargs: constructor arguments of its demonstrations, over ``kwargs``.
        warmup_demos: its number of oracle demonstrations.
        eval_size: its number of held-out tasks.
        rollout: its episodes' budgets (``[rollout]`` with the entry's keys).

    Slots compare (and hash) by identity: :func:`env_slots` builds a run's list once per call.
    """

    index: int
    id: str
    weight: float
    kwargs: dict[str, Any]
    warmup_kwargs: dict[str, Any]
    warmup_demos: int
    eval_size: int
    rollout: RolloutConfig


def demo_shares(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (> 0) by largest remainders (Hamilton's
    method): each share is ⌊total·w/Σw⌋ or one more, and the shares sum to ``total``; ties go
    to the earlier entry.

    Raises:
        ValueError: no weights, or a weight <= 0.
    """
    if not weights or min(weights) <= 0:
        raise ValueError(f"demo_shares: weights must be > 0, got {list(weights)}")
    exact = [total * w / sum(weights) for w in weights]
    shares = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def env_slots(config: TrainConfig) -> list[EnvSlot]:
    """The envs of a mixture run, in ``env.mix`` order; [] for a single-env run."""
    entries = config.env.mix
    if not entries:
        return []
    weights = [e.weight for e in entries]
    shares = demo_shares(config.warmup.num_demos, weights)
    return [
        EnvSlot(
            index=i,
            id=e.id,
            weight=e.weight / sum(weights),
            kwargs=dict(e.kwargs),
            warmup_kwargs=dict(e.warmup_kwargs),
            warmup_demos=shares[i] if e.warmup_demos < 0 else e.warmup_demos,
            eval_size=e.eval_size or config.eval.size,
            rollout=dataclasses.replace(config.rollout, **e.rollout),
        )
        for i, e in enumerate(entries)
    ]


def is_mixture(config: TrainConfig) -> bool:
    """Whether ``config`` trains on a mixture (``[[env.mix]]`` entries)."""
    return bool(config.env.mix)


def slot_of(slots: Sequence[EnvSlot], trajectory: Trajectory) -> EnvSlot:
    """The env of ``trajectory`` (by its ``env_id``; a mixture has one entry per id).

    Raises:
        KeyError: the trajectory's env is not one of ``slots``.
    """
    for slot in slots:
        if slot.id == trajectory.env_id:
            return slot
    raise KeyError(f"trajectory of env {trajectory.env_id!r} is not in the mixture")


def slot_base_kwargs(config: TrainConfig, slot: EnvSlot) -> dict[str, Any]:
    """``slot``'s constructor arguments from the config alone: ``[tools.permissions]`` (as
    ``permissions``; :func:`~agentic_rl.envs.make` puts it into the env's context) and its
    ``kwargs``. Never raises (an env that cannot take the table fails in :func:`check_slots`)."""
    permissions = {"permissions": config.tools.permissions} if config.tools.permissions else {}
    return {**permissions, **slot.kwargs}


def slot_env_kwargs(run: Run, slot: EnvSlot, **extra: Any) -> dict[str, Any]:
    """Constructor arguments of ``slot``'s envs in ``run`` (a :class:`~agentic_rl.trainer.run.Run`):
    ``[tools.permissions]``, its ``kwargs``, ``extra``, and the run's ``context`` (audit log and
    run id, as :func:`agentic_rl.trainer.run.env_kwargs` for one env)."""
    from agentic_rl.trainer.run import run_context

    return {**slot_base_kwargs(run.config, slot), **extra, "context": run_context(run.run_dir)}


def slot_replay_kwargs(run: Run, slot: EnvSlot, **extra: Any) -> dict[str, Any]:
    """The kwargs stored with ``slot``'s trajectories so replay can rebuild the env."""
    kwargs = slot_env_kwargs(run, slot, **extra)
    return {k: v for k, v in kwargs.items() if k not in ("audit_path", "run_id", "context")}


def check_slots(config: TrainConfig) -> None:
    """Build each env of a mixture with its kwargs and with its warm-up's (then close it).

    Raises:
        ConfigError: an env rejects its ``kwargs`` or ``warmup_kwargs`` (the key is named), or
            ``[tools.permissions]`` (an env that takes none, or a rule it does not fit).
    """
    from agentic_rl.envs import make
    from agentic_rl.tools.mcp import McpServerError

    for slot in env_slots(config):
        base = slot_base_kwargs(config, slot)
        key = f"env.mix[{slot.index}]"
        for name, kwargs in (("kwargs", base), ("warmup_kwargs", {**base, **slot.warmup_kwargs})):
            try:
                make(slot.id, **kwargs).close()
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{key}.{name} rejected by {slot.id}: {exc}") from None
            except McpServerError as exc:
                raise ConfigError(f"{key}.kwargs.mcp_servers: {exc}") from None


@dataclass(frozen=True)
class MixTask:
    """One RL task of a mixture: the env (its slot's index) and the task seed."""

    slot: int
    seed: int


@dataclass
class RewardNorm:
    """Per-env running reward moments and the scaling of ``env.reward_norm = "std"`` (module
    docstring: the formula).

    Args:
        decay: d, applied to the moments before each update (0 <= d <= 1).
        eps: ε added to σ_e (> 0).
    """

    decay: float
    eps: float
    moments: dict[str, list[float]] = field(default_factory=dict)  # env -> [n, Σ R, Σ R²]

    def update(self, trajectories: Sequence[Trajectory]) -> None:
        """Decay every env's moments, then add the scored rollouts' total rewards to their env's."""
        for m in self.moments.values():
            m[:] = [self.decay * x for x in m]
        for t in trajectories:
            if t.failed or t.reward is None:
                continue
            m = self.moments.setdefault(t.env_id, [0.0, 0.0, 0.0])
            r = float(t.reward)
            m[0], m[1], m[2] = m[0] + 1.0, m[1] + r, m[2] + r * r

    def std(self, env_id: str) -> float:
        """σ_e of the env's decayed moments (0 before its first rollout)."""
        n, s, q = self.moments.get(env_id, (0.0, 0.0, 0.0))
        if n <= 0:
            return 0.0
        return math.sqrt(max(q / n - (s / n) ** 2, 0.0))

    def scale(self, trajectories: Sequence[Trajectory]) -> list[Trajectory]:
        """Copies of ``trajectories`` whose total and per-turn rewards are divided by their env's
        σ_e + ε (unscored ones are returned as they are)."""
        out = []
        for t in trajectories:
            if t.reward is None:
                out.append(t)
                continue
            c = 1.0 / (self.std(t.env_id) + self.eps)
            turns = tuple(dataclasses.replace(turn, reward=turn.reward * c) for turn in t.turns)
            out.append(dataclasses.replace(t, reward=t.reward * c, turns=turns))
        return out


class MixturePool:
    """The task draws of a mixture run (module docstring), its per-env task pools and its
    per-env reward moments: the one object a run's checkpoint saves (``Run.task_pool``).

    Args:
        slots: the run's envs (:func:`env_slots`).
        seed: the stream's seed (the run's seed; under torchrun one per rank).
        seed_start: ``env.train_seed_start``.
        task_sampling: ``sequential``, ``uniform`` or ``difficulty`` (``sampling.task_sampling``).
        level_of: ``level_of(slot, seed)``: the level of a task (for ``difficulty``).
        norm: the reward moments (None: ``env.reward_norm = "none"``).
    """

    def __init__(
        self,
        slots: Sequence[EnvSlot],
        seed: int,
        seed_start: int,
        task_sampling: str,
        level_of: Callable[[EnvSlot, int], str],
        norm: RewardNorm | None = None,
    ):
        if not slots:
            raise ValueError("MixturePool needs at least one env")
        self.slots, self.seed, self.seed_start = list(slots), seed, seed_start
        self.sequential = task_sampling == "sequential"
        self.norm = norm
        self.pools = [
            TaskPool(
                seed=seed,
                seed_start=seed_start,
                difficulty=task_sampling == "difficulty",
                level_of=lambda s, slot=slot: level_of(slot, s),
            )
            for slot in self.slots
        ]
        self.next_seed = [0] * len(self.slots)  # sequential: tasks drawn per env so far
        self.draws = 0
        self.lock = threading.RLock()
        self._cumulative = [sum(s.weight for s in self.slots[: i + 1]) for i in range(len(slots))]

    def _envs(self, n: int) -> list[int]:
        """The envs (slot indices) of the next ``n`` tasks: systematic sampling, then shuffled."""
        rng = random.Random(f"mixture/{self.seed}/{self.draws}")
        self.draws += 1
        u, top = rng.random(), self._cumulative[-1]
        last = len(self.slots) - 1
        envs = [
            min(bisect.bisect_right(self._cumulative, (u + k) / n * top), last) for k in range(n)
        ]
        rng.shuffle(envs)
        return envs

    def draw(self, n: int, exclude: Sequence[MixTask] = ()) -> list[MixTask]:
        """The next ``n`` tasks (distinct, none in ``exclude``), in a shuffled env order.

        Raises:
            ValueError: ``n`` < 0.
        """
        if n < 0:
            raise ValueError(f"MixturePool.draw: n must be >= 0, got {n}")
        with self.lock:
            envs = self._envs(n) if n else []
            seeds: dict[int, list[int]] = {}
            for e in sorted(set(envs)):
                count = envs.count(e)
                if self.sequential:
                    first = self.seed_start + self.next_seed[e]
                    seeds[e] = list(range(first, first + count))
                    self.next_seed[e] += count
                else:
                    taken = [t.seed for t in exclude if t.slot == e]
                    seeds[e] = self.pools[e].draw(count, taken)
            return [MixTask(e, seeds[e].pop(0)) for e in envs]

    def update(
        self, trajectories: Sequence[Trajectory], is_success: Callable[[Trajectory], bool]
    ) -> None:
        """Each env's task pool learns from its own rollouts; the reward moments (if any) too."""
        with self.lock:
            for slot, pool in zip(self.slots, self.pools):
                pool.update([t for t in trajectories if t.env_id == slot.id], is_success)
            if self.norm is not None:
                self.norm.update(trajectories)

    @property
    def counts(self) -> dict[str, list[float]]:
        """The level counts of every env, keyed ``<env id>/<level>``."""
        return {
            f"{slot.id}/{level}": c
            for slot, pool in zip(self.slots, self.pools)
            for level, c in pool.counts.items()
        }

    def acceptance(self, key: str) -> float:
        """The acceptance probability of level ``<env id>/<level>`` in its env's pool."""
        for slot, pool in zip(self.slots, self.pools):
            if key.startswith(slot.id + "/"):
                return pool.acceptance(key.removeprefix(slot.id + "/"))
        raise KeyError(f"no env of the mixture has level key {key!r}")

    def state(self) -> dict:
        """JSON-serialisable state for checkpoints (:meth:`load_state`)."""
        with self.lock:
            return {
                "draws": self.draws,
                "next_seed": list(self.next_seed),
                "pools": {s.id: p.state() for s, p in zip(self.slots, self.pools)},
                "reward_moments": {} if self.norm is None else dict(self.norm.moments),
            }

    def load_state(self, state: dict) -> None:
        """Restore what :meth:`state` returned."""
        self.draws = int(state.get("draws", 0))
        self.next_seed = [int(x) for x in state.get("next_seed", self.next_seed)]
        for slot, pool in zip(self.slots, self.pools):
            pool.load_state(state.get("pools", {}).get(slot.id, {}))
        if self.norm is not None:
            self.norm.moments = {
                k: [float(x) for x in v] for k, v in state.get("reward_moments", {}).items()
            }


def make_mixture_pool(run: Run) -> MixturePool:
    """The mixture pool of a :func:`~agentic_rl.trainer.run.setup` run: per-env task pools with
    the run's seed (one stream per rank under torchrun); a level is read from a fresh env's
    reset info, an env without levels is probed once."""
    from agentic_rl.envs.registry import reset_level

    cfg = run.config
    leveled: dict[str, bool] = {}

    def level_of(slot: EnvSlot, seed: int) -> str:
        if not leveled.get(slot.id, True):
            return ""
        level = reset_level(slot.id, seed, **slot_replay_kwargs(run, slot))
        leveled[slot.id] = level is not None
        return level or ""

    norm = None
    if cfg.env.reward_norm == "std":
        norm = RewardNorm(cfg.env.reward_norm_decay, cfg.env.reward_norm_eps)
    ranks = run.ranks
    return MixturePool(
        env_slots(cfg),
        seed=cfg.seed * max(ranks.world_size, 1) + ranks.rank,
        seed_start=cfg.env.train_seed_start,
        task_sampling=cfg.sampling.task_sampling,
        level_of=level_of,
        norm=norm,
    )
