"""The environment contract (Gymnasium semantics, messages instead of arrays).

An environment is one POMDP episode at a time::

    observation, info = env.reset(seed=None, options=None)
    observation, reward, terminated, truncated, info = env.step(action)

* ``reset`` with the same seed gives the same task and the same first observation, so the G
  members of a group share their start (DESIGN.md, decision 2).
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

Reference: Gymnasium ``gymnasium/core.py`` (Env API, terminated vs truncated).
"""

from __future__ import annotations

import abc
from typing import Any

from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.types import Action, Observation


class EpisodeEndedError(RuntimeError):
    """``step`` was called after the episode terminated or was truncated; call ``reset``."""


class EpisodeNotStartedError(RuntimeError):
    """``step`` was called before ``reset``."""


class SnapshotNotSupportedError(NotImplementedError):
    """The env cannot snapshot or restore its state (the message names the env)."""


class Env(abc.ABC):
    """Base class of agentic-rl environments (see the module docstring for the contract)."""

    #: registered id, set by :func:`agentic_rl.envs.make`
    env_id: str = ""
    #: one-line description shown by ``agentic-rl envs``
    description: str = ""

    @abc.abstractmethod
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode; returns the first observation (system + task messages and tools)."""

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
