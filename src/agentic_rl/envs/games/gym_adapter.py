"""A Gymnasium env with a discrete action space, played as a multi-turn text POMDP.

Observation
    On reset: a system message (the game's goal, the action syntax, the horizon) and a user
    message with the state as text: ``describe(env, obs)`` if given, else the env's ``ansi``
    render with colour codes stripped plus ``Observation: <obs>``. After each turn: one user
    message saying which action was taken, the game's reward, and the new state (or the error
    for an invalid action); on the last turn, how the episode ended.
Action syntax
    ``<action>NAME</action>`` (or the action's index), see :mod:`agentic_rl.envs.games.text`.
Invalid actions
    An unparseable reply or unknown name does not reach the game: the observation says why and
    repeats the syntax, the step reward is 0, ``info["valid_action"]`` is False (the rubric's
    process component ``valid_actions`` drops), and the turn counts toward the horizon.
Reward
    ``step`` returns the game's own reward of the turn (``Turn.reward``; see
    :mod:`agentic_rl.envs.games.rubric` for the per-turn keys and the rubric).
History
    ``keep_history=True`` (the default): the conversation grows turn by turn. ``False``: every
    step's observation is a context reset (``Observation.context_reset``): the policy then sees
    the system prompt and one user message with the last action's result and the current state,
    a Markov observation for fully observed games (each turn is its own token segment, see
    :mod:`agentic_rl.rollout.context`). The context stays a few hundred tokens however long the
    episode, which a small model reads far more reliably than a 2,000-token history of maps.
Horizon
    ``max_steps`` turns (invalid ones included), then ``truncated``; the game's own time limit
    also truncates. ``terminated`` is the game's own termination.
Oracle
    Value iteration (:mod:`agentic_rl.envs.games.planning`) on the env's known model
    ``unwrapped.P`` when it has one; None otherwise.

Reference: Gymnasium ``gymnasium/core.py`` (the wrapped env's API).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentic_rl.envs.base import Env
from agentic_rl.envs.games.planning import greedy_action, value_iteration
from agentic_rl.envs.games.rubric import game_rubric
from agentic_rl.envs.games.text import action_help, parse_action, strip_ansi
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.types import Action, Message, Observation

#: describe(unwrapped_env, observation) -> state text
Describe = Callable[[Any, Any], str]
#: success(observation, reward, terminated) -> did this final step win the game
Success = Callable[[Any, float, bool], bool]


def _default_success(obs: Any, reward: float, terminated: bool) -> bool:
    return terminated and reward > 0


class GymTextEnv(Env):
    """Any Gymnasium env with a ``Discrete`` action space as a text POMDP (module docstring).

    Args:
        gym_id: a Gymnasium id, e.g. ``"FrozenLake-v1"``.
        gym_kwargs: keyword arguments of ``gymnasium.make``.
        action_names: names of actions 0..n-1 (default: ``"0"``, ``"1"``, ...).
        title: the game's name in the instructions.
        goal: one or two sentences explaining the goal.
        describe: state renderer (default: stripped ``ansi`` render plus the raw observation).
        success: which final step counts as a win (default: terminated with reward > 0).
        max_steps: horizon in turns.
        keep_history: False: each step's observation wipes the conversation (module docstring).

    Raises:
        ValueError: ``gym_id`` is unknown to Gymnasium, the action space is not ``Discrete``,
            ``action_names`` has the wrong length, or ``max_steps`` < 1.
    """

    description = "A Gymnasium env with a discrete action space as a text game"

    def __init__(
        self,
        gym_id: str,
        gym_kwargs: dict[str, Any] | None = None,
        action_names: Sequence[str] | None = None,
        title: str = "",
        goal: str = "",
        describe: Describe | None = None,
        success: Success | None = None,
        max_steps: int = 20,
        keep_history: bool = True,
    ):
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.gym_id = gym_id
        self.gym_kwargs = dict(gym_kwargs or {})
        self.title = title or gym_id
        self.goal = goal
        self.describe = describe
        self.success = success or _default_success
        self.max_steps = max_steps
        self.keep_history = bool(keep_history)
        self._gym = self._make_gym(self.gym_kwargs)
        n = self._num_actions(self._gym)
        self.action_names = (
            tuple(action_names) if action_names is not None else tuple(str(i) for i in range(n))
        )
        if len(self.action_names) != n:
            raise ValueError(
                f"{gym_id} has {n} actions but {len(self.action_names)} action names were given"
            )
        self._q: np.ndarray | None = None
        self._obs: Any = None
        self._return = 0.0

    # -- construction helpers (subclasses change the gym kwargs per seed) -----------------------

    def _make_gym(self, kwargs: dict[str, Any]) -> Any:
        import gymnasium
        from gymnasium.envs.registration import load_env_creator

        try:
            entry = gymnasium.spec(self.gym_id).entry_point
        except gymnasium.error.Error as exc:
            raise ValueError(f"unknown Gymnasium id {self.gym_id!r}: {exc}") from None
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        modes = getattr(creator, "metadata", {}).get("render_modes", [])
        render_mode = "ansi" if "ansi" in modes else None  # e.g. Blackjack has no text render
        return gymnasium.make(
            self.gym_id, render_mode=render_mode, disable_env_checker=True, **kwargs
        )

    @staticmethod
    def _num_actions(gym_env: Any) -> int:
        from gymnasium.spaces import Discrete

        space = gym_env.action_space
        if not isinstance(space, Discrete):
            raise ValueError(f"only Discrete action spaces can be played as text, got {space}")
        if int(space.start) != 0:
            raise ValueError(f"Discrete action spaces must start at 0, got start={space.start}")
        return int(space.n)

    def _gym_kwargs_for(self, seed: int) -> dict[str, Any] | None:
        """Gym kwargs for the episode of ``seed``; None keeps the current env (the default)."""
        return None

    # -- the Env contract ----------------------------------------------------------------------

    def system_prompt(self) -> str:
        """The instructions shown on reset."""
        goal = f" {self.goal}" if self.goal else ""
        return (
            f"You are playing {self.title}.{goal}\n{action_help(self.action_names)}\n"
            f"You have at most {self.max_steps} turns."
        )

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start the episode of ``seed`` (drawn from ``np_random`` if None): same seed, same start."""
        seed = self.start_episode(seed, options)
        kwargs = self._gym_kwargs_for(int(seed))
        if kwargs is not None and kwargs != self.gym_kwargs:
            self._gym.close()
            self.gym_kwargs = kwargs
            self._gym = self._make_gym(kwargs)
            self._q = None
        self._obs, _ = self._gym.reset(seed=int(seed))
        self._return = 0.0
        messages = (Message("system", self.system_prompt()), Message("user", self.state_text()))
        return Observation(messages=messages), {"game": self.gym_id}

    def state_text(self) -> str:
        """The current state as text (``describe`` or the stripped ANSI render)."""
        if self.describe is not None:
            return self.describe(self._gym.unwrapped, self._obs)
        text = self._gym.render() if self._gym.render_mode == "ansi" else ""
        rendered = strip_ansi(text or "").strip("\n")
        return f"{rendered}\nObservation: {self._obs}" if rendered else f"Observation: {self._obs}"

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Parse the reply into an action and play it (module docstring)."""
        self.begin_step()
        index, error = parse_action(action.text, self.action_names)
        if index is None:
            reward, terminated, truncated, won = 0.0, False, False, False
            text = f"Invalid action: {error}. {action_help(self.action_names)}"
        else:
            self._obs, reward, terminated, truncated, _ = self._gym.step(index)
            reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
            won = bool(terminated and self.success(self._obs, reward, terminated))
            text = f"You chose {self.action_names[index]}. Reward: {reward:g}.\n{self.state_text()}"
        self._return += reward
        truncated = not terminated and (truncated or self.episode.turn >= self.max_steps)
        if terminated:
            text += "\nThe game is over: you won." if won else "\nThe game is over: you lost."
        elif truncated:
            text += "\nThe turn limit is reached."
        if terminated or truncated:
            self.end_episode()
        info = {
            "valid_action": index is not None,
            "won": won,
            "game_return": self._return,
            "action": self.action_names[index] if index is not None else None,
        }
        obs = Observation(
            messages=(Message("user", text),),
            process_reward=0.0 if index is not None else -1.0,
            context_reset=not self.keep_history,
        )
        return obs, reward, terminated, truncated, info

    def oracle_action(self) -> int | None:
        """The optimal action by value iteration on ``unwrapped.P``; None without a model or after the end."""
        if not self.episode.started or self.episode.done:
            return None
        model = getattr(self._gym.unwrapped, "P", None)
        if model is None:
            return None
        if self._q is None:
            self._q = value_iteration(model, len(model), len(self.action_names))
        return greedy_action(self._q, int(self._obs))

    def oracle_reply(self) -> str | None:
        """``<action>NAME</action>`` of :meth:`oracle_action`, or None."""
        index = self.oracle_action()
        return None if index is None else f"<action>{self.action_names[index]}</action>"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """The games' default rubric (:func:`agentic_rl.envs.games.rubric.game_rubric`)."""
        return game_rubric(weights)

    def close(self) -> None:
        """Close the Gymnasium env (safe to call twice)."""
        if self._gym is not None:
            self._gym.close()
