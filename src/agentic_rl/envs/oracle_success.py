"""The oracle-success part of ``check_env``: how many oracle episodes must succeed.

An env whose outcomes are partly chance (slippery ice) cannot ask its oracle to win every
episode. It declares ``oracle_expected_success``: read after each ``reset``, the probability
that its oracle succeeds from that start (FrozenLake computes it exactly from its model). The
checker then runs a one-sided test: with X the number of successes of independent episodes with
those probabilities (Poisson-binomial; binomial when they are equal), the observed count k
fails when P(X ≤ k) < :data:`ORACLE_ALPHA`, so a correct oracle fails with probability at most
that, and an oracle far below its declaration fails (e.g. declared 0.99, 1 win of 4:
P = 4·10⁻⁶). Envs without a declaration must succeed on every seed, or on a fixed fraction
(``min_oracle_success`` / ``oracle_min_success``).

:func:`play_oracle` plays the oracle's episodes the checks score (it lives here, beside the test
of their success, and not in :mod:`agentic_rl.envs.contract`, which the env base imports: the
contract's per-value checks import no env).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action, Message, StopReason, Trajectory, Turn

__all__ = [
    "ORACLE_ALPHA",
    "declared_success",
    "oracle_success_problems",
    "play_oracle",
    "success_tail",
]

#: significance of the test: a correct oracle fails it with probability at most this
ORACLE_ALPHA = 1e-3


def success_tail(probabilities: Sequence[float], successes: int) -> float:
    """P(X ≤ successes) for X the number of successes of independent trials with these probabilities.

    X is Poisson-binomial (binomial when all probabilities are equal); computed exactly by
    convolving the trials one at a time, O(n²).
    """
    dist = [1.0]
    for p in probabilities:
        dist = [a * (1.0 - p) + b * p for a, b in zip([*dist, 0.0], [0.0, *dist])]
    return min(1.0, sum(dist[: successes + 1]))


def declared_success(env: Env, seed: int, declared: list[float]) -> list[str]:
    """Reset ``env`` to ``seed`` and append its ``oracle_expected_success`` to ``declared``.

    Returns the problems (an invalid declaration); nothing is appended when the env declares none.
    """
    env.reset(seed=seed)
    value = getattr(env, "oracle_expected_success", None)
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return [
            f"seed {seed}: oracle_expected_success must be a probability in [0, 1], got {value!r}"
        ]
    declared.append(float(value))
    return []


def oracle_success_problems(
    n: int, successes: int, missed: list[str], declared: list[float], min_success: float | None
) -> list[str]:
    """Why ``successes`` of ``n`` oracle episodes are too few (empty list when they are enough).

    Args:
        n: episodes played (one per seed).
        successes: episodes whose outcome was 1.
        missed: a description of each other episode.
        declared: the env's ``oracle_expected_success`` per seed (used when it has all ``n``).
        min_success: a fixed floor on the success fraction, which takes precedence; None
            means the declared probabilities or, without them, 1.0.
    """
    rate = successes / max(n, 1)
    if not missed:
        return []
    if (
        min_success is None and len(declared) == n
    ):  # chance outcomes with a declared probability per seed
        tail = success_tail(declared, successes)
        if tail < ORACLE_ALPHA:
            return [
                f"the oracle succeeded on {successes} of {n} seeds ({rate:.0%}), far below its declared "
                f"expected success {sum(declared) / n:.0%}: P(X <= {successes}) = {tail:.2g} < "
                f"{ORACLE_ALPHA:g}; missed {', '.join(missed)}"
            ]
        return []
    floor = 1.0 if min_success is None else min_success
    if rate < floor - 1e-9:
        return [
            f"the oracle did not succeed on {', '.join(missed)}: success {rate:.0%}, needs {floor:.0%}"
        ]
    return []


def play_oracle(
    env: Env, seed: int, *, max_turns: int = 200, on_step: Callable[[Any, int], None] | None = None
) -> Trajectory:
    """Play one episode of ``env`` with its own oracle; return the (unscored) trajectory.

    Token streams are empty (no tokenizer is involved). ``on_step(step_result, turn)`` sees
    every raw ``step`` return value.

    Raises:
        ValueError: the oracle has no reply before the episode ended.
        Exception: whatever ``reset``/``step`` raise, unchanged.
    """
    obs, info = env.reset(seed=seed, options={"trajectory_id": f"check-{seed}"})
    messages = list(obs.messages)
    turns: list[Turn] = []
    stop = StopReason.MAX_TURNS
    for index in range(max_turns):
        text = env.oracle_reply()
        if text is None:
            raise ValueError(
                f"seed {seed}: oracle_reply() returned None at turn {index} before the episode ended"
            )
        calls, errors = parse_tool_calls(text, turn_index=index)
        result = env.step(Action(text=text, tool_calls=calls, tool_call_errors=errors))
        if on_step is not None:
            on_step(result, index)
        step_obs, reward, terminated, truncated, step_info = result
        messages.append(Message("assistant", text))
        messages.extend(step_obs.messages)
        turns.append(
            Turn.from_step(index, Action(text, calls, errors), step_obs, reward, step_info)
        )
        if terminated or truncated:
            stop = StopReason.TERMINATED if terminated else StopReason.TRUNCATED
            break
    return Trajectory(
        env.env_id,
        seed,
        f"check-{seed}",
        f"check-{seed}",
        tuple(messages),
        tuple(turns),
        (),
        (),
        (),
        stop,
        info=dict(info),
    )
