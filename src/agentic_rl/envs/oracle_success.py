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
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_rl.envs.base import Env

__all__ = ["ORACLE_ALPHA", "declared_success", "oracle_success_problems", "success_tail"]

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
