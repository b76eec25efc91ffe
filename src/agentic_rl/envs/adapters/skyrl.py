"""SkyRL-Gym environments (``skyrl-gym`` 0.4.0, extra ``skyrl``) as agentic-rl envs: ``skyrl/<env>-v0``.

SkyRL-Gym's envs (``skyrl_gym.envs.base_text_env.BaseTextEnv``) are text-in/text-out:
``init(prompt) -> (messages, metadata)`` and ``step(action_text) -> {"observations", "reward",
"done", "metadata"}``, built by ``skyrl_gym.make(name, env_config=..., extras=row)`` from one
dataset row (its prompt and ``reward_spec``/``reward_model`` with the ground truth).
``make("skyrl/gsm8k-v0")`` builds a :class:`SkyRLEnv` around SkyRL's own ``gsm8k`` env; the
package is imported when an id of the family is resolved, not when :mod:`agentic_rl.envs` is.

Supported envs (:data:`SKYRL_ENVS`; all offline)
    ``gsm8k`` (one turn, ``#### N``), ``gsm8k_multi_turn`` (up to ``max_turns`` tries, SkyRL's
    per-turn rewards) and ``aime`` (one turn, ``Answer: N``; SkyRL scores +1/−1). The others
    need what this adapter cannot generate offline: ``search``/``searchcode`` a retrieval
    server, ``text2sql`` database files, ``lcb`` LiveCodeBench test data; their ids are an
    UnknownEnvError that says so.
Task
    No dataset is downloaded: the seed picks a generated arithmetic word problem
    (:func:`make_task`, ``random.Random(seed)``; 1-3 operations, the level), rendered as the
    dataset row SkyRL's own preprocessing writes for that env (the user prompt with SkyRL's
    answer-format instruction, the ground truth in the row's extras). Same seed, same task.
Observation
    On reset: the messages SkyRL's ``init`` returns for the row's prompt. After a step: SkyRL's
    ``observations`` (e.g. ``gsm8k_multi_turn``'s retry prompt), empty on the last turn.
Action
    ``Action.text`` (the decoded text of the sampled tokens) goes to SkyRL's ``step`` as it is:
    no re-tokenization, no parsing here. A reply SkyRL cannot parse scores SkyRL's 0 (or −1);
    a SkyRL ``step`` that raises ends the episode with an error observation, reward 0 and
    ``info["skyrl_error"]`` (logged by the weight-0 ``skyrl_errors`` component), never a crash.
Reward
    ``step`` returns SkyRL's own reward of the turn (``Turn.reward``). Rubric: outcome
    ``skyrl_outcome`` = SkyRL's reward of the final turn mapped from the env's reward range to
    [0, 1] and clipped, ``(r - low) / (high - low)`` (gsm8k: [0, 1]; aime: [−1, 1], so a wrong
    answer is 0); 0 when the episode did not end by SkyRL's ``done``. ``skyrl_reward`` (the raw
    Σ of SkyRL's rewards) and ``skyrl_errors`` are weight-0 metrics; cost ``generated_tokens``.
Horizon
    SkyRL's ``done`` ends the episode (terminated); ``max_turns`` turns without it truncate.
Oracle
    The task's worked solution in the env's answer format (its ground truth is known).
Snapshots
    Not supported (SkyRL envs hold arbitrary state): rollback replays from ``reset(seed)``.

Reference: SkyRL ``skyrl-gym/skyrl_gym/envs/base_text_env.py`` and
``examples/gsm8k/gsm8k_dataset.py`` (the dataset row layout).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import random
import re
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.envs.registry import EnvSpec
from agentic_rl.errors import EnvUnavailableError, UnknownEnvError
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.costs import token_cost
from agentic_rl.types import Action, Message, Observation, Trajectory

__all__ = [
    "SKYRL_ENVS",
    "SKYRL_PATTERN",
    "SkyRLEnv",
    "SkyRLTask",
    "make_task",
    "resolve_skyrl_id",
    "skyrl_env_names",
]

SKYRL_PATTERN = "skyrl/<env>-v0"
SKYRL_PREFIX = "skyrl/"
_SKYRL_ID = re.compile(r"^skyrl/([A-Za-z0-9_]+)-v(\d+)$")
INSTALL = "pip install 'agentic-rl[skyrl]'"
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
AIME_INSTRUCTION = (
    "Solve the problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem."
)

#: config keys the ``train --env`` shortcut sets before the user's ``--set``
SKYRL_RECIPE: dict[str, Any] = {"rollout.max_new_tokens": 128}


@dataclasses.dataclass(frozen=True)
class SkyRLEnvInfo:
    """How one SkyRL env is fed: its answer format, its reward range, and why it is offline."""

    instruction: str
    answer_line: str  # format of the oracle's last line, with {answer}
    reward_range: tuple[float, float]
    description: str


#: the SkyRL envs this adapter can feed offline, by SkyRL id
SKYRL_ENVS: dict[str, SkyRLEnvInfo] = {
    "gsm8k": SkyRLEnvInfo(
        GSM8K_INSTRUCTION, "#### {answer}", (0.0, 1.0), "SkyRL gsm8k (one turn, '#### N')"
    ),
    "gsm8k_multi_turn": SkyRLEnvInfo(
        GSM8K_INSTRUCTION,
        "#### {answer}",
        (0.0, 1.0),
        "SkyRL gsm8k_multi_turn (retries, per-turn rewards)",
    ),
    "aime": SkyRLEnvInfo(
        AIME_INSTRUCTION, "Answer: {answer}", (-1.0, 1.0), "SkyRL aime (one turn, 'Answer: N')"
    ),
}
_UNSUPPORTED = {
    "search": "needs a retrieval server",
    "searchcode": "needs a retrieval server",
    "text2sql": "needs the dataset's database files",
    "lcb": "needs LiveCodeBench test data",
}


@dataclasses.dataclass(frozen=True)
class SkyRLTask:
    """One generated task: the question, its integer answer, the worked solution, and its level."""

    question: str
    answer: str
    work: str
    level: str


_NAMES = ("Mia", "Ravi", "Lena", "Omar", "Yuki", "Sam")
_ITEMS = ("apples", "stickers", "marbles", "books", "coins", "shells")


def make_task(seed: int) -> SkyRLTask:
    """The arithmetic word problem of ``seed`` (deterministic; level ``ops-1`` .. ``ops-3``).

    Never raises for an integer seed; every answer is a non-negative integer.
    """
    rng = random.Random(int(seed))
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    ops = 1 + int(seed) % 3
    total = rng.randint(5, 60)
    text = [f"{name} has {total} {item}."]
    work = [str(total)]
    for _ in range(ops):
        kind = rng.choice(("buy", "give", "double") if total <= 200 else ("give",))
        if kind == "buy":
            n = rng.randint(2, 40)
            text.append(f"Then {name} buys {n} more.")
            work.append(f"{total} + {n} = {total + n}")
            total += n
        elif kind == "give" and total > 1:
            n = rng.randint(1, total - 1)
            text.append(f"Then {name} gives {n} away.")
            work.append(f"{total} - {n} = {total - n}")
            total -= n
        else:
            text.append(f"Then the number of {item} {name} has doubles.")
            work.append(f"{total} * 2 = {total * 2}")
            total *= 2
    text.append(f"How many {item} does {name} have now?")
    return SkyRLTask(" ".join(text), str(total), "\n".join(work[1:]), f"ops-{ops}")


def _json_safe(value: Any) -> Any:
    """``value`` as JSON values (unknown types as their ``str``); the trajectory store writes info."""
    return json.loads(json.dumps(value, default=str))


def _require_skyrl() -> Any:
    try:
        return importlib.import_module("skyrl_gym")
    except ImportError as exc:
        raise EnvUnavailableError(
            f"skyrl/* envs need the 'skyrl-gym' package ({exc}); install it with {INSTALL}"
        ) from None


class SkyRLEnv(Env):
    """A SkyRL-Gym text env fed with generated tasks (see the module docstring).

    Args:
        name: the SkyRL env id, one of :data:`SKYRL_ENVS`.
        max_turns: horizon in turns (also ``gsm8k_multi_turn``'s own ``max_turns``), >= 1.

    Raises:
        ValueError: ``name`` is not a supported SkyRL env or ``max_turns`` < 1.
        EnvUnavailableError: ``skyrl-gym`` is not installed (the message names the extra).
    """

    description = "A SkyRL-Gym env (extra 'skyrl')"

    def __init__(self, name: str = "gsm8k", max_turns: int = 5):
        if name not in SKYRL_ENVS:
            raise ValueError(f"unsupported SkyRL env {name!r}; supported: {sorted(SKYRL_ENVS)}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self._skyrl = _require_skyrl()
        self.name, self.max_turns, self.spec_info = name, int(max_turns), SKYRL_ENVS[name]
        self.task: SkyRLTask | None = None
        self._env: Any = None

    def _extras(self, task: SkyRLTask) -> dict[str, Any]:
        """The dataset row's extras SkyRL's env reads its ground truth from."""
        if self.name == "aime":
            return {"reward_model": {"ground_truth": task.answer}}
        extras: dict[str, Any] = {"reward_spec": {"method": "rule", "ground_truth": task.answer}}
        if self.name == "gsm8k_multi_turn":
            extras.update(max_turns=self.max_turns, extra_info={})
        return extras

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Build SkyRL's env for the task of ``seed`` (random if None) and ``init`` it."""
        seed = self.start_episode(seed, options)
        self.close()
        self.task = make_task(seed)
        self._env = self._skyrl.make(self.name, env_config=None, extras=self._extras(self.task))
        prompt = [{"role": "user", "content": f"{self.task.question} {self.spec_info.instruction}"}]
        messages, metadata = self._env.init(prompt)
        info = {
            "level": self.task.level,
            "skyrl_env": self.name,
            "expected": self.task.answer,
            "skyrl_metadata": _json_safe(metadata or {}),
        }
        return Observation(messages=tuple(Message(m["role"], m["content"]) for m in messages)), info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Pass ``action.text`` to SkyRL's ``step`` (module docstring).

        Raises:
            EpisodeNotStartedError: before ``reset``.
            EpisodeEndedError: after the episode ended.
        """
        self.begin_step(self._env is not None and self.task is not None)
        try:
            out = self._env.step(action.text)
            reward, done = float(out["reward"]), bool(out["done"])
            messages = tuple(Message(m["role"], m["content"]) for m in out["observations"] or ())
            info = {"skyrl_metadata": _json_safe(out.get("metadata") or {}), "skyrl_error": None}
        except Exception as exc:  # noqa: BLE001 - a SkyRL env that raises on a reply
            error = f"{type(exc).__name__}: {exc}"
            reward, done, info = 0.0, True, {"skyrl_metadata": {}, "skyrl_error": error}
            messages = (Message("user", f"The environment could not process the reply: {error}"),)
        truncated = not done and self.episode.turn >= self.max_turns
        if done or truncated:
            self.end_episode()
        info.update(
            skyrl_reward=reward,
            skyrl_outcome=self.normalise(reward) if done else 0.0,
            level=self.task.level,
            expected=self.task.answer,
        )
        return Observation(messages=messages), reward, done, truncated, info

    def normalise(self, reward: float) -> float:
        """SkyRL's ``reward`` mapped from the env's reward range to [0, 1], clipped. Never raises."""
        low, high = self.spec_info.reward_range
        return min(1.0, max(0.0, (reward - low) / (high - low)))

    def oracle_reply(self) -> str | None:
        """The worked solution ending in the env's answer line; None before reset or after the end."""
        if self.task is None or self.episode.done:
            return None
        line = self.spec_info.answer_line.format(answer=self.task.answer)
        return f"{self.task.work}\n{line}"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components in the module docstring)."""
        return Rubric(
            [
                RewardFunction("skyrl_outcome", RewardGroup.OUTCOME, skyrl_outcome),
                RewardFunction("skyrl_reward", RewardGroup.OUTCOME, skyrl_reward, weight=0.0),
                RewardFunction("skyrl_errors", RewardGroup.OUTCOME, skyrl_errors, weight=0.0),
                token_cost(),
            ],
            weights,
        )

    def close(self) -> None:
        """Close SkyRL's env (safe to call twice)."""
        if self._env is not None:
            self._env.close()
            self._env = None


def skyrl_outcome(trajectory: Trajectory) -> float:
    """SkyRL's final reward normalised to [0, 1] (``info["skyrl_outcome"]``); 0 without an end."""
    if trajectory.turns and trajectory.terminated:
        return float(trajectory.turns[-1].info.get("skyrl_outcome", 0.0))
    return 0.0


def skyrl_reward(trajectory: Trajectory) -> float:
    """Σ of SkyRL's own per-turn rewards (``Turn.reward``), a logged metric."""
    return float(sum(t.reward for t in trajectory.turns))


def skyrl_errors(trajectory: Trajectory) -> float:
    """Number of turns on which SkyRL's ``step`` raised (a logged metric)."""
    return float(sum(t.info.get("skyrl_error") is not None for t in trajectory.turns))


def skyrl_env_names() -> list[str]:
    """The supported SkyRL env ids, sorted (imports nothing)."""
    return sorted(SKYRL_ENVS)


def resolve_skyrl_id(env_id: str) -> EnvSpec:
    """The registry entry (factory, description, recipe) of a ``skyrl/<env>-v0`` id; the factory takes ``max_turns``.

    Raises:
        EnvUnavailableError: ``skyrl-gym`` is not installed (names ``pip install 'agentic-rl[skyrl]'``).
        UnknownEnvError: not a supported SkyRL env (the reason for SkyRL's other envs), or the
            version is not 0.
    """
    match = _SKYRL_ID.match(env_id)
    name = match.group(1) if match else env_id[len(SKYRL_PREFIX) :]
    if match is None or match.group(2) != "0" or name not in SKYRL_ENVS:
        why = f" ({name} {_UNSUPPORTED[name]})" if name in _UNSUPPORTED else ""
        raise UnknownEnvError(
            f"unknown env id {env_id!r}{why}: ids of this family look like {SKYRL_PATTERN} with "
            f"a supported SkyRL env; supported: {', '.join(skyrl_env_names())}",
            f"{name} {_UNSUPPORTED[name]}" if name in _UNSUPPORTED else None,
        )
    _require_skyrl()

    def factory(max_turns: int = 5) -> SkyRLEnv:
        return SkyRLEnv(name, max_turns=max_turns)

    return EnvSpec(env_id, factory, SKYRL_ENVS[name].description, recipe_overrides=SKYRL_RECIPE)
