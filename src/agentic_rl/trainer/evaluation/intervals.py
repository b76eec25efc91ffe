"""Confidence intervals for held-out success rates and for the lift that training adds.

* :func:`wilson_interval`: the Wilson score interval of a binomial proportion (Wilson 1927,
  "Probable inference, the law of succession, and statistical inference", JASA 22:209-212).
  With p̂ = k/n and z the two-sided normal quantile (1.96 for 95 %)::

      centre = (p̂ + z²/(2n)) / (1 + z²/n)
      half   = z / (1 + z²/n) · sqrt(p̂(1 − p̂)/n + z²/(4n²))
      [centre − half, centre + half]   (always inside [0, 1], never empty at k = 0 or k = n)

  It keeps close to nominal coverage for small n and extreme p̂, where the normal (Wald)
  interval p̂ ± z·sqrt(p̂(1−p̂)/n) collapses to a point (Brown, Cai & DasGupta 2001,
  "Interval estimation for a binomial proportion", Statistical Science 16:101-133).

* :func:`paired_bootstrap` and :func:`pooled_paired_bootstrap`: percentile bootstrap intervals
  (Efron & Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13) of the mean paired
  difference d_i = after_i − before_i over the same tasks. Resampling tasks (pairs) with
  replacement keeps each task's before and after together, so the task-to-task variation that
  both evaluations share cancels, and the interval is much narrower than one built from two
  independent proportions. The interval is [q_{α/2}, q_{1−α/2}] of the B resampled means
  (numpy's linear-interpolation quantiles); resamples come from a seeded
  ``numpy.random.default_rng``, so the same inputs always give the same interval.

Pure functions of numbers: no I/O, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

#: resamples of the bootstrap intervals unless told otherwise
DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval ``[low, high]`` (same units)."""

    estimate: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        """``{"estimate", "low", "high"}`` (for JSON)."""
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


def _z(confidence: float) -> float:
    """Two-sided standard-normal quantile for ``confidence`` (0.95 -> 1.959964).

    Raises:
        ValueError: ``confidence`` is not strictly between 0 and 1.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval of a success rate ``successes / n`` (formula in the module docstring).

    Args:
        successes: number of successful episodes, ``0 <= successes <= n``.
        n: number of episodes, ``n >= 1``.
        confidence: two-sided coverage, e.g. 0.95.

    Returns:
        ``Interval(estimate=successes/n, low, high)``, all fractions in [0, 1].

    Raises:
        ValueError: ``n < 1``, ``successes`` outside ``[0, n]``, or a bad ``confidence``.
    """
    if n < 1:
        raise ValueError(f"wilson_interval needs n >= 1, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")
    z = _z(confidence)
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


def _differences(before: Sequence[float], after: Sequence[float]) -> np.ndarray:
    """``after − before`` as a float array; raises ValueError on unequal or zero lengths."""
    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if b.ndim != 1 or b.shape != a.shape:
        raise ValueError(
            f"before and after must be 1-D and paired, got shapes {b.shape} and {a.shape}"
        )
    if b.size == 0:
        raise ValueError("paired bootstrap needs at least one task")
    return a - b


def _percentile_interval(estimate: float, resampled: np.ndarray, confidence: float) -> Interval:
    _z(confidence)  # validates confidence
    alpha = 1.0 - confidence
    low, high = np.quantile(resampled, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Interval(float(estimate), float(low), float(high))


def paired_bootstrap(
    before: Sequence[float],
    after: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """Percentile bootstrap interval of the mean paired difference ``mean(after − before)``.

    Args:
        before, after: one value per task (e.g. 0/1 success), shape ``(n,)`` each, in the same
            task order (``before[i]`` and ``after[i]`` are the same task).
        resamples: bootstrap resamples B (tasks drawn with replacement, n per resample).
        seed: seed of the resampling generator.
        confidence: two-sided coverage.

    Returns:
        ``Interval(estimate=mean(after − before), low, high)`` in the inputs' units (fractions
        for 0/1 success: multiply by 100 for points). All differences equal gives
        ``low == high == estimate``.

    Raises:
        ValueError: unequal lengths, no tasks, ``resamples < 1`` or a bad ``confidence``.
    """
    return pooled_paired_bootstrap(
        [(before, after)], resamples=resamples, seed=seed, confidence=confidence
    )


def pooled_paired_bootstrap(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """Bootstrap interval of the mean over runs of each run's mean paired difference.

    Each run (e.g. a training seed) has its own tasks; every resample draws tasks with
    replacement *within* each run, takes each run's mean ``after − before`` and averages those
    means with equal weight per run. The estimate is ``mean_r mean_i (after_ri − before_ri)``.
    With one run this is :func:`paired_bootstrap`.

    Args:
        pairs: one ``(before, after)`` per run, each of shape ``(n_r,)`` (``n_r`` may differ).
        resamples, seed, confidence: as :func:`paired_bootstrap`.

    Returns:
        ``Interval`` of the across-run mean difference.

    Raises:
        ValueError: no runs, a run with unequal lengths or no tasks, ``resamples < 1`` or a bad
            ``confidence``.
    """
    if not pairs:
        raise ValueError("pooled_paired_bootstrap needs at least one run")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    diffs = [_differences(before, after) for before, after in pairs]
    total = np.zeros(resamples)
    for d in diffs:
        total += d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    estimate = float(np.mean([d.mean() for d in diffs]))
    return _percentile_interval(estimate, total / len(diffs), confidence)
