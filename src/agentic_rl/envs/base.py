"""The environment contract (Gymnasium semantics, messages instead of arrays).

An environment is one POMDP episode at a time::

    observation, info = env.reset(seed=None, options=None)
    observation, reward, terminated, truncated, info = env.step(action)

* ``reset`` with the same seed gives the same task and the same first observation, so the G
  members of a group share their start (docs/design.md, decision 2).
* ``terminated``: the task ended (e.g. a final answer was given). ``truncated``: the env's
  own limit ran out. Rollout budgets (turns, tokens) are applied by the rollout engine.
* Observations are chat messages; the env never sees token ids.
* ``step`` after the episode ended raises :class:`EpisodeEndedError`; ``step`` before ``reset``
  raises :class:`EpisodeNotStartedError`.
* ``oracle_reply()`` returns the scripted reference policy's next reply in the current state
  (used for demonstrations and by the environment checker), or None if the env has none.
* ``rubric()`` returns the env's default :class:`~agentic_rl.rewards.Rubric`.
* ``snapshot()`` returns an opaque, immutable value holding the env's whole episode state;
  ``restore(snapshot)`` brings the env back to it, so that ``step`` then behaves exactly as
  it did after the snapshot (same observations and rewards for the same actions). Snapshots
  can be restored any number of times, and into another instance built with the same
  arguments. Envs that cannot do this raise :class:`SnapshotNotSupportedError` (the default);
  :func:`agentic_rl.rollout.rollback.rollback` then falls back to ``reset(seed)`` + replay.
  Each env's docstring says what its snapshot does *not* restore (e.g. effects outside the
  sandbox, background processes). An episode's side effects never leak into the next one:
  ``reset`` starts from a fresh (or restored) state.

Every env is a real :class:`gymnasium.Env` (so Gymnasium's own
``gymnasium.utils.env_checker.check_env``, wrappers and ``gymnasium.make`` work on it):

* ``observation_space`` is an :class:`~agentic_rl.envs.spaces.ObservationSpace` and
  ``action_space`` an :class:`~agentic_rl.envs.spaces.ActionSpace` (chat messages; text and tool
  calls), one of each per instance; an env may assign its own in ``__init__``.
* Seeding follows Gymnasium: ``reset(seed=n)`` seeds the env's ``np_random`` with ``n`` and
  plays the task of ``n``; ``reset()`` without a seed plays the task of a seed drawn from
  ``np_random``, so it is reproducible after a seeded reset and random otherwise
  (:meth:`Env.episode_seed` does both; subclasses call it, or ``super().reset(seed=seed)``).
* ``metadata["render_modes"]`` is empty and ``render_mode`` None: episodes are read as chat
  transcripts (``agentic-rl view``), not rendered frames.
* :mod:`agentic_rl.envs.registry` registers every id in Gymnasium's registry as
  ``agentic_rl/<id>`` (``gymnasium.make("agentic_rl/calculator-v0")``).

Reference: Gymnasium ``gymnasium/core.py`` (Env API, terminated vs truncated, seeding).
"""

from __future__ import annotations

import abc
import dataclasses
import uuid
from typing import Any

import gymnasium
import numpy as np

from agentic_rl.envs.spaces import ActionSpace, ObservationSpace
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.types import Action, Observation


class EpisodeEndedError(RuntimeError):
    """``step`` was called after the episode terminated or was truncated; call ``reset``."""


class EpisodeNotStartedError(RuntimeError):
    """``step`` was called before ``reset``."""


class SnapshotNotSupportedError(NotImplementedError):
    """The env cannot snapshot or restore its state (the message names the env)."""


@dataclasses.dataclass(frozen=True)
class EpisodeState:
    """The episode bookkeeping :class:`Env` keeps for every env (an immutable value).

    Attributes:
        started: an episode was started (:meth:`Env.start_episode`); ``step`` before it raises
            :class:`EpisodeNotStartedError`.
        turn: turns stepped so far in the episode (:meth:`Env.begin_step` counts them).
        done: the episode ended (:meth:`Env.end_episode`); ``step`` then raises
            :class:`EpisodeEndedError`.
        trajectory_id: the episode's id in audit logs (``options["trajectory_id"]`` of
            ``reset``, else a random hex id).
    """

    started: bool = False
    turn: int = 0
    done: bool = False
    trajectory_id: str = ""


class Env(gymnasium.Env[Observation, Action], abc.ABC):
    """Base class of agentic-rl environments (see the module docstring for the contract).

    A :class:`gymnasium.Env` whose observations are :class:`~agentic_rl.types.Observation`
    values and whose actions are :class:`~agentic_rl.types.Action` values.

    The base keeps each episode's bookkeeping (an :class:`EpisodeState`): subclasses read it
    through the read-only property :attr:`episode` (``self.episode.turn``, ``.done``,
    ``.started``, ``.trajectory_id``), and change it only through the episode hooks
    :meth:`start_episode` (in ``reset``), :meth:`begin_step` (first thing in ``step``: the
    guards, then the turn count), :meth:`end_episode` (the episode ended: terminated or
    truncated) and :meth:`restore_episode` (in ``restore``; :attr:`episode` is the value to put in a
    snapshot).
    """

    #: registered id, set by :func:`agentic_rl.envs.make`
    env_id: str = ""
    #: one-line description shown by ``agentic-rl envs``
    description: str = ""
    #: Gymnasium metadata: no render modes (episodes are chat transcripts)
    metadata: dict[str, Any] = {"render_modes": []}

    _episode: EpisodeState = EpisodeState()

    @property
    def episode(self) -> EpisodeState:
        """The current episode's bookkeeping (read-only: turn, done, started, trajectory id),
        changed only by the episode hooks. Never raises."""
        return self._episode

    def start_episode(self, seed: int | None, options: dict[str, Any] | None = None) -> int:
        """Episode hook for ``reset``: seed (:meth:`episode_seed`), then a fresh episode (started,
        turn 0, not done) named ``options["trajectory_id"]`` (a random hex id without one).

        Returns:
            The episode's seed: ``seed``, or one drawn from ``np_random``.

        Raises:
            gymnasium.error.Error: ``seed`` is negative or not an integer.
        """
        seed = self.episode_seed(seed)
        trajectory_id = str((options or {}).get("trajectory_id") or uuid.uuid4().hex)
        self._episode = EpisodeState(started=True, trajectory_id=trajectory_id)
        return seed

    def begin_step(self, started: bool | None = None) -> int:
        """Episode hook, first thing in ``step``: the guards (:meth:`check_step`), then count the
        turn (:meth:`count_turn`).

        Args:
            started: whether ``reset`` has drawn a task; None uses ``episode.started``.

        Returns:
            The turn now being stepped (1 for the episode's first step).

        Raises:
            EpisodeNotStartedError: the episode was not started.
            EpisodeEndedError: the episode already ended.
        """
        self.check_step(started)
        return self.count_turn()

    def check_step(self, started: bool | None = None) -> None:
        """Episode hook: the guards of ``step`` alone, for an env that counts the turn only once
        the step succeeded (:meth:`count_turn`).

        Args:
            started: whether ``reset`` has drawn a task; None uses ``episode.started``.

        Raises:
            EpisodeNotStartedError: the episode was not started.
            EpisodeEndedError: the episode already ended.
        """
        if not (self._episode.started if started is None else started):
            raise EpisodeNotStartedError("step() called before reset()")
        if self._episode.done:
            raise EpisodeEndedError("step() called after the episode ended; call reset() first")

    def count_turn(self) -> int:
        """Episode hook: count one more turn; returns the new ``episode.turn``. Never raises."""
        self._episode = dataclasses.replace(self._episode, turn=self._episode.turn + 1)
        return self._episode.turn

    def end_episode(self) -> None:
        """Episode hook: mark the episode ended (a later ``step`` raises
        :class:`EpisodeEndedError`). Subclasses that hold per-episode resources extend it."""
        self._episode = dataclasses.replace(self._episode, done=True)

    def restore_episode(self, state: EpisodeState) -> None:
        """Episode hook for :meth:`restore`: put back ``state`` (:attr:`episode` of a snapshot, or
        built from a snapshot's fields). Never raises."""
        self._episode = state

    @property
    def observation_space(self) -> gymnasium.spaces.Space[Observation]:
        """The env's observation space (an :class:`ObservationSpace` unless one was assigned)."""
        space = self.__dict__.get("_observation_space")
        if space is None:
            space = self.__dict__["_observation_space"] = ObservationSpace()
        return space

    @observation_space.setter
    def observation_space(self, space: gymnasium.spaces.Space[Observation]) -> None:
        self.__dict__["_observation_space"] = space

    @property
    def action_space(self) -> gymnasium.spaces.Space[Action]:
        """The env's action space (an :class:`ActionSpace` unless one was assigned)."""
        space = self.__dict__.get("_action_space")
        if space is None:
            space = self.__dict__["_action_space"] = ActionSpace()
        return space

    @action_space.setter
    def action_space(self, space: gymnasium.spaces.Space[Action]) -> None:
        self.__dict__["_action_space"] = space

    def episode_seed(self, seed: int | None) -> int:
        """Seed ``np_random`` as :meth:`gymnasium.Env.reset` does and return the episode's seed.

        Args:
            seed: the seed given to ``reset``; None keeps ``np_random`` (a random one if it
                was never seeded) and draws the episode's seed from it, in [0, 2**31).

        Returns:
            ``seed`` itself, or the drawn seed.

        Raises:
            gymnasium.error.Error: ``seed`` is negative or not an integer (Gymnasium's rule).
        """
        if seed is not None:
            seed = int(seed) if isinstance(seed, (int, np.integer)) else seed
        gymnasium.Env.reset(self, seed=seed)
        if seed is None:
            return int(self.np_random.integers(2**31))
        return seed

    @abc.abstractmethod
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode; returns the first observation (system + task messages and tools).

        Subclasses seed through :meth:`episode_seed` (this base body only seeds ``np_random``,
        as ``super().reset(seed=seed)`` does in Gymnasium, and returns nothing).
        """
        gymnasium.Env.reset(self, seed=seed, options=options)

    @abc.abstractmethod
    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Apply one policy action; returns ``(observation, reward, terminated, truncated, info)``.

        Raises:
            EpisodeEndedError: the episode already ended.
            EpisodeNotStartedError: ``reset`` was never called.
        """

    def oracle_reply(self) -> str | None:
        """The scripted reference policy's reply in the current state (None: no oracle)."""
        return None

    @abc.abstractmethod
    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """The env's default rubric with the given group weights."""

    def snapshot(self) -> Any:
        """An immutable value holding the current episode state (see the module docstring).

        Raises:
            SnapshotNotSupportedError: the env cannot snapshot its state (this default).
        """
        raise SnapshotNotSupportedError(
            f"env {self.env_id or type(self).__name__!r} does not support snapshot()"
        )

    def restore(self, snapshot: Any) -> None:
        """Bring the env back to the state of ``snapshot`` (from :meth:`snapshot`).

        Raises:
            SnapshotNotSupportedError: the env cannot restore state (this default).
            TypeError: ``snapshot`` is not one of this env's snapshots (envs that implement it).
        """
        raise SnapshotNotSupportedError(
            f"env {self.env_id or type(self).__name__!r} does not support restore()"
        )

    def close(self) -> None:  # noqa: B027 - optional hook: most envs hold nothing to release
        """Release resources (sandboxes, files). Safe to call twice."""
