"""verifiers environments (``verifiers`` 0.4.0, in its own virtualenv) as agentic-rl envs: ``verifiers/<taskset>-v0``.

A verifiers (v1) environment is a taskset package: ``<taskset>`` exports a ``vf.Taskset``
whose tasks carry a prompt and score a rollout's trace with their ``@reward`` functions.
``make("verifiers/vf_products-v0")`` builds a :class:`VerifiersEnv` on the taskset
``vf_products``, which must be importable by the verifiers virtualenv's Python (installed
there, or on ``PYTHONPATH``).

Why a separate environment
    verifiers 0.4.0 requires ``openai<3`` and ``mcp==2.0.0``; this project's test extra pins
    openai 3.57 and its mcp extra fastmcp 4.1.6 (which needs a newer mcp). The two cannot
    share one environment, so ``make install-verifiers`` builds ``.venv-verifiers`` and the
    adapter talks to :mod:`agentic_rl.envs.adapters.verifiers_bridge`, run there by that
    environment's Python, over JSON lines on a pair of pipes of their own (not stdin/stdout),
    each request with an id and a deadline (:mod:`agentic_rl.envs.adapters.verifiers_client`).
    This module never imports verifiers. The bridge process starts on the first use, is shared
    by the envs of one taskset in this process (it is stateless between requests), and is
    stopped at exit, by :func:`close_bridges`, or by a finalizer.
Which Python
    ``python=`` if given, else ``$AGENTIC_RL_VERIFIERS_PYTHON``, else
    ``.venv-verifiers/bin/python`` in the project root (the source checkout holding this
    package; never the working directory or its parents: :mod:`agentic_rl.venvs`).
Supported tasksets
    Single-turn ones: the plain ``SingleAgentEnv`` and no toolsets, which is what verifiers'
    own chat harness does with a tool-less taskset (one model call, then scoring). A taskset
    with its own ``Env.run`` (multi-turn games, user simulators) or with toolsets is refused
    with the reason: verifiers 0.4.0 runs those through harness programs it installs with
    ``uv`` at run time (network) and an interception proxy, which this adapter does not drive.
Task
    The seed picks task ``seed mod len(taskset)`` (the seed-th of an infinite taskset).
Observation
    The task's system prompt and prompt as messages.
Action
    ``Action.text`` (the decoded sampled text, unchanged) is the trace's one sampled assistant
    message; the episode ends (terminated) after it.
Reward
    verifiers' ``Task.score`` on that trace. ``step`` returns verifiers' total (Σ score·weight
    of its rewards). Rubric: outcome ``verifiers_reward`` = that total clipped to [0, 1]; each
    verifiers reward ``<name>`` is the weight-0 component ``vf_<name>`` (its score) and each
    verifiers metric is in ``info["verifiers_metrics"]``; cost ``generated_tokens``.
Errors
    Loud, never a silent 0: a bridge that does not start or a taskset that does not load
    raises :class:`~agentic_rl.errors.EnvUnavailableError`; a scoring function that raises
    raises :class:`VerifiersError` (the rollout engine marks that episode ``StopReason.ERROR``),
    and so does a request that gets no answer within ``timeout_s`` (a scorer that hangs) or
    an answer out of step: the bridge is killed and the next request starts a fresh one.
Oracle
    verifiers defines none; by the common dataset convention, the task data's ``answer`` field
    is the oracle's reply. A taskset without it has no oracle: the ``train`` shortcut turns the
    warm-up and guidance off, and ``check-env``'s oracle check fails with that reason.
Snapshots
    Not supported: rollback replays from ``reset(seed)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from agentic_rl.envs.adapters.verifiers_client import (
    DEFAULT_TIMEOUT_S,
    PYTHON_ENV_VAR,
    VerifiersBridge,
    VerifiersError,
    bridge_for,
    close_bridges,
    find_verifiers_python,
)
from agentic_rl.envs.base import Env
from agentic_rl.envs.registry import EnvSpec
from agentic_rl.errors import UnknownEnvError
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.costs import token_cost
from agentic_rl.types import Action, Message, Observation, Trajectory

__all__ = [
    "PYTHON_ENV_VAR",
    "VERIFIERS_PATTERN",
    "VerifiersBridge",
    "VerifiersEnv",
    "VerifiersError",
    "close_bridges",
    "find_verifiers_python",
    "resolve_verifiers_id",
]

VERIFIERS_PATTERN = "verifiers/<taskset>-v0"
VERIFIERS_PREFIX = "verifiers/"
_VERIFIERS_ID = re.compile(r"^verifiers/([A-Za-z_][A-Za-z0-9_.]*)-v(\d+)$")

#: config keys the ``train --env`` shortcut sets before the user's ``--set``
VERIFIERS_RECIPE: dict[str, Any] = {"rollout.max_new_tokens": 96}


class VerifiersEnv(Env):
    """A single-turn verifiers taskset behind the bridge (see the module docstring).

    Args:
        taskset: the verifiers taskset id (an importable package of the verifiers Python).
        python: the verifiers virtualenv's Python (None: :func:`find_verifiers_python`).
        timeout_s: seconds one ``reset`` or ``step`` request may take (> 0, finite); past it
            the bridge is killed and the call raises :class:`VerifiersError`.

    Raises:
        EnvUnavailableError: no verifiers Python, or the taskset did not load or is not
            single-turn (the message says why).
        ValueError: ``timeout_s`` is not a positive finite number.
    """

    description = "A verifiers taskset (own virtualenv, `make install-verifiers`)"

    def __init__(
        self, taskset: str, python: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ):
        if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < math.inf):
            raise ValueError(f"timeout_s must be a positive finite number, got {timeout_s!r}")
        self.taskset, self.timeout_s = taskset, float(timeout_s)
        self.bridge = bridge_for(taskset, python)
        self._seed: int | None = None
        self._answer: str | None = None

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """The prompt of the task of ``seed`` (random if None).

        Raises:
            VerifiersError: the bridge failed to give the task (an error, no answer in time).
        """
        seed = self.start_episode(seed, options)
        task = self.bridge.request({"op": "task", "seed": seed}, self.timeout_s)
        self._seed, self._answer = seed, task["answer"]
        messages = tuple(Message(m["role"], m["content"]) for m in task["messages"])
        return Observation(messages=messages), {"verifiers_task": task["name"]}

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Score ``action.text`` with the task's own rewards; the episode ends.

        Raises:
            EpisodeNotStartedError: before ``reset``.
            EpisodeEndedError: after the episode ended.
            VerifiersError: a verifiers scoring function raised (named in the message), or
                gave no answer within ``timeout_s`` (the bridge was killed; it restarts).
        """
        self.begin_step(self._seed is not None)
        self.end_episode()
        request = {"op": "score", "seed": self._seed, "reply": action.text}
        scored = self.bridge.request(request, self.timeout_s)
        skipped = sorted(k for k, v in scored["rewards"].items() if v is None)
        if skipped:
            raise VerifiersError(f"verifiers ({self.taskset}): rewards {skipped} were not scored")
        total = float(scored["reward"])
        info = {
            "verifiers_reward": total,
            "verifiers_rewards": {k: float(v[0]) for k, v in scored["rewards"].items()},
            "verifiers_weights": {k: float(v[1]) for k, v in scored["rewards"].items()},
            "verifiers_metrics": scored["metrics"],
        }
        return Observation(messages=()), total, True, False, info

    def oracle_reply(self) -> str | None:
        """The task data's ``answer`` (None: the taskset has no answer field, or no episode)."""
        return None if self._seed is None or self.episode.done else self._answer

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components in the module docstring)."""
        named = [
            RewardFunction(f"vf_{name}", RewardGroup.OUTCOME, _one_reward(name), weight=0.0)
            for name in self.bridge.reward_names
        ]
        return Rubric(
            [
                RewardFunction("verifiers_reward", RewardGroup.OUTCOME, verifiers_reward),
                *named,
                token_cost(),
            ],
            weights,
        )


def verifiers_reward(trajectory: Trajectory) -> float:
    """verifiers' total reward clipped to [0, 1]; 0 when the episode has no scored turn."""
    if trajectory.turns and trajectory.terminated:
        return min(1.0, max(0.0, float(trajectory.turns[-1].info.get("verifiers_reward", 0.0))))
    return 0.0


def _one_reward(name: str) -> Callable[[Trajectory], float]:
    """The score of verifiers' reward ``name`` on the trajectory's last turn (0 when absent)."""

    def component(trajectory: Trajectory) -> float:
        if not trajectory.turns:
            return 0.0
        return float(trajectory.turns[-1].info.get("verifiers_rewards", {}).get(name, 0.0))

    component.__name__ = f"vf_{name}"
    return component


def resolve_verifiers_id(env_id: str) -> EnvSpec:
    """The registry entry (factory, description, recipe) of a ``verifiers/<taskset>-v0`` id; the
    factory takes ``python`` and
    ``timeout_s`` (env kwargs).

    Raises:
        UnknownEnvError: the id is not of the form ``verifiers/<taskset>-v0``.
        EnvUnavailableError: no verifiers virtualenv, or the taskset does not load.
    """
    match = _VERIFIERS_ID.match(env_id)
    if match is None or match.group(2) != "0":
        raise UnknownEnvError(
            f"unknown env id {env_id!r}: ids of this family look like {VERIFIERS_PATTERN}, with "
            "a verifiers taskset importable by the verifiers virtualenv"
        )
    taskset = match.group(1)
    bridge = bridge_for(taskset)  # loads the taskset: a wrong id fails here, with the reason

    def factory(python: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> VerifiersEnv:
        return VerifiersEnv(taskset, python=python, timeout_s=timeout_s)

    overrides = dict(VERIFIERS_RECIPE)
    has_answer = bridge.request({"op": "task", "seed": 0})["answer"] is not None
    if not has_answer:  # no demonstrations and no guidance without an oracle
        overrides.update({"warmup.enabled": False, "sampling.guidance": "off"})
    return EnvSpec(
        env_id, factory, f"verifiers taskset {taskset} (single-turn)", recipe_overrides=overrides
    )


def verifiers_tasksets() -> list[str]:
    """No listing: a taskset is any importable package of the verifiers Python. Returns []."""
    return []
