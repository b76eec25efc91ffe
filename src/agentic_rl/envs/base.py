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


class Env(abc.ABC):
    """Base class of agentic-rl environments (see the module docstring for the contract)."""

    #: registered id, set by :func:`agentic_rl.envs.make`
    env_id: str = ""
    #: one-line description shown by ``agentic-rl envs``
    description: str = ""

    @abc.abstractmethod
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
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

    def close(self) -> None:
        """Release resources (sandboxes, files). Safe to call twice."""
