"""The environment checker: proves that an env obeys the contract of :mod:`agentic_rl.envs.base`.

In the spirit of Gymnasium's ``gymnasium/utils/env_checker.py``::

    from agentic_rl.envs.checker import check_env
    report = check_env("calculator-v0", seeds=range(5))   # raises EnvCheckError on any failure
    report.passed                                        # ('make', 'step_before_reset', ...)

``check_env`` runs every check below and collects *all* failures before raising one
:class:`EnvCheckError` whose message lists each failed check by name:

==========================  ==================================================================
check                       what it requires
==========================  ==================================================================
``make``                    the id is registered and the env builds (ids only)
``step_before_reset``       ``step`` on a fresh env raises :class:`EpisodeNotStartedError`
``reset_determinism``       two fresh envs reset with the same seed give the same first
                            observation and the same reset info (the task)
``observation``             every observation is an :class:`Observation` of
                            :class:`Message` s (role in system/user/assistant/tool, str
                            content) whose typed step data have their types (tuples of
                            ToolResult / RiskEvent / MemoryEvent, a finite process reward or
                            None, a bool context reset); the first one is non-empty and
                            renders to JSON chat messages (``[{"role": ..., "content": ...}]``)
``tool_schemas``            every tool is ``{"name", "description", "parameters"}`` with a
                            unique name and ``parameters`` a valid JSON Schema (Draft 2020-12,
                            checked with ``jsonschema``) of ``"type": "object"``
``step_return``             ``step`` returns ``(Observation, float, bool, bool, dict)`` with a
                            finite reward and a JSON-serialisable info dict (the trajectory
                            store writes it)
``oracle``                  ``oracle_reply`` gives a reply in every state before the end, the
                            oracle's episodes end within ``max_turns``, and the rubric's
                            outcome group is 1 (success) on every seed; or, for an env with
                            chance outcomes that declares ``oracle_expected_success`` (the
                            probability, read after each reset, that its oracle succeeds from
                            that start), the number of successes is not improbably low:
                            P(X ≤ successes) ≥ :data:`ORACLE_ALPHA` for X the Poisson-binomial
                            count of the declared probabilities; or a fixed floor, the fraction
                            ``min_oracle_success`` / the env's ``oracle_min_success`` attribute
``step_after_end``          ``step`` after the end raises :class:`EpisodeEndedError`
``rubric``                  ``rubric()`` is a :class:`Rubric`; on the oracle's trajectories its
                            total is finite, each group component equals the weighted sum of
                            its functions, and the total equals Σ sign·λ·group (docs/design.md,
                            decision 3) for the default and for non-default group weights
``snapshot``                restoring the snapshot taken after reset or after any oracle turn,
                            into the same env or a fresh one, makes the next oracle action give
                            the recorded observation and reward (only envs whose
                            ``snapshot()`` does not raise ``SnapshotNotSupportedError``, and
                            once the checks above passed; skipped, not failed, otherwise)
``close``                   ``close`` can be called twice
==========================  ==================================================================

The oracle's episodes are played without a tokenizer (the env layer never imports the policy
layer): the reply text goes through the same tool-call parser as in the rollout engine, and
the trajectory is built with empty token streams. The per-value checks and the oracle's
episode live in :mod:`agentic_rl.envs.contract`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rl.envs.base import (
    Env,
    EpisodeEndedError,
    EpisodeNotStartedError,
    SnapshotNotSupportedError,
)
from agentic_rl.envs.contract import (
    ROLES,
    observation_problems,
    rubric_problems,
    step_problems,
    tool_schema_problems,
)
from agentic_rl.envs.oracle_success import (
    ORACLE_ALPHA,
    declared_success,
    oracle_success_problems,
    play_oracle,
    success_tail,
)
from agentic_rl.errors import AgenticRLError
from agentic_rl.rewards import RewardWeights
from agentic_rl.types import Action, StopReason, Trajectory

__all__ = [
    "CHECKS",
    "ORACLE_ALPHA",
    "CheckFailure",
    "CheckReport",
    "EnvCheckError",
    "ROLES",
    "check_env",
    "observation_problems",
    "play_oracle",
    "rubric_problems",
    "step_problems",
    "success_tail",
    "tool_schema_problems",
]

CHECKS = (
    "make",
    "step_before_reset",
    "reset_determinism",
    "observation",
    "tool_schemas",
    "step_return",
    "oracle",
    "step_after_end",
    "rubric",
    "snapshot",
    "close",
)
_OTHER_WEIGHTS = RewardWeights(outcome=2.0, process=0.5, cost=3.0, risk=0.25)


@dataclass(frozen=True)
class CheckFailure:
    """One failed check: its name (one of :data:`CHECKS`) and what went wrong."""

    check: str
    message: str


@dataclass(frozen=True)
class CheckReport:
    """The result of :func:`check_env` when every check passed.

    Attributes:
        env_id: the checked env's id ("" for an unregistered instance).
        seeds: the seeds used.
        passed: names of the checks that ran and passed, in order.
        oracle_success: fraction of seeds on which the oracle succeeded (1.0 when passing,
            unless the env has chance outcomes).
        oracle_expected_success: the mean of the env's declared ``oracle_expected_success``
            over the seeds; None when it declares none.
    """

    env_id: str
    seeds: tuple[int, ...]
    passed: tuple[str, ...]
    oracle_success: float
    oracle_expected_success: float | None = None


class EnvCheckError(AgenticRLError, AssertionError):
    """An env broke the contract; ``failures`` lists every failed check.

    The message has one line per failure: ``[check] message``.
    """

    def __init__(self, env_id: str, failures: Sequence[CheckFailure]):
        self.env_id = env_id
        self.failures = tuple(failures)
        lines = "\n".join(f"  [{f.check}] {f.message}" for f in self.failures)
        super().__init__(
            f"env {env_id or '<instance>'} failed {len(self.failures)} check(s):\n{lines}"
        )


class _Checks:
    """Collects failures; ``run(name, fn)`` records an exception or a returned message as a failure."""

    def __init__(self) -> None:
        self.failures: list[CheckFailure] = []
        self.passed: list[str] = []

    def fail(self, check: str, message: str) -> None:
        self.failures.append(CheckFailure(check, message))

    def run(self, check: str, fn: Callable[[], list[str] | None]) -> None:
        before = len(self.failures)
        try:
            messages = fn() or []
        except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
            messages = [f"raised {type(exc).__name__}: {exc}"]
        for m in messages:
            self.fail(check, m)
        if len(self.failures) == before and check not in self.passed:
            self.passed.append(check)


def _determinism(make_env: Callable[[], Env], seeds: Sequence[int]) -> list[str]:
    problems = []
    for seed in seeds:
        a, b = make_env(), make_env()
        try:
            (obs_a, info_a), (obs_b, info_b) = a.reset(seed=seed), b.reset(seed=seed)
            obs_a2, info_a2 = a.reset(seed=seed)  # a second reset of the same instance, too
        finally:
            a.close()
            b.close()
        if obs_a != obs_b or obs_a != obs_a2:
            problems.append(f"seed {seed}: the same seed gave different first observations")
        if _canonical(info_a) != _canonical(info_b) or _canonical(info_a) != _canonical(info_a2):
            problems.append(
                f"seed {seed}: the same seed gave different reset info (task): {info_a!r} vs {info_b!r}"
            )
    return problems


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _step_before_reset(make_env: Callable[[], Env]) -> list[str]:
    env = make_env()
    try:
        env.step(Action(text="<answer>0</answer>"))
    except EpisodeNotStartedError:
        return []
    except Exception as exc:  # noqa: BLE001
        return [
            f"step before reset raised {type(exc).__name__} ({exc}), not EpisodeNotStartedError"
        ]
    finally:
        env.close()
    return ["step before reset did not raise (expected EpisodeNotStartedError)"]


def _oracle_and_rubric(
    checks: _Checks,
    make_env: Callable[[], Env],
    seeds: Sequence[int],
    max_turns: int,
    weights: RewardWeights,
    min_success: float | None,
) -> tuple[float, float | None]:
    """Play the oracle on every seed; return its success rate and the mean declared expected success."""
    successes, missed, declared = 0, [], []
    floor = min_success
    for seed in seeds:
        env = make_env()
        try:
            outcome = _check_seed(checks, env, seed, max_turns, weights, declared)
            if floor is None and getattr(env, "oracle_min_success", None) is not None:
                floor = float(env.oracle_min_success)
        finally:
            env.close()
        if outcome is True:
            successes += 1
        elif isinstance(outcome, str):
            missed.append(outcome)
    checks.run(
        "oracle", lambda: oracle_success_problems(len(seeds), successes, missed, declared, floor)
    )
    return successes / max(len(seeds), 1), (sum(declared) / len(declared) if declared else None)


def _check_seed(
    checks: _Checks,
    env: Env,
    seed: int,
    max_turns: int,
    weights: RewardWeights,
    declared: list[float],
) -> bool | str | None:
    """The per-seed checks on ``env``: True when the oracle succeeded, a description of the
    miss when it did not, None when its episode could not be scored."""
    checks.run(
        "observation",
        lambda: observation_problems(env.reset(seed=seed)[0], f"seed {seed} reset", first=True),
    )
    checks.run(
        "tool_schemas",
        lambda: [f"seed {seed}: {p}" for p in tool_schema_problems(env.reset(seed=seed)[0].tools)],
    )
    checks.run("oracle", lambda: declared_success(env, seed, declared))
    step_issues: list[str] = []
    played: list[Trajectory] = []

    def play() -> list[str]:
        played.append(
            play_oracle(
                env,
                seed,
                max_turns=max_turns,
                on_step=lambda r, i: step_issues.extend(step_problems(r, f"seed {seed} turn {i}")),
            )
        )
        if played[0].stop_reason == StopReason.MAX_TURNS:
            return [f"seed {seed}: the oracle's episode did not end within {max_turns} turns"]
        return []

    checks.run("oracle", play)
    checks.run("step_return", lambda: step_issues)
    if not played:
        return None
    trajectory = played[0]
    checks.run("step_after_end", lambda: _step_after_end(env, trajectory))
    rubric_ok = True
    for w in (weights, _OTHER_WEIGHTS):
        before = len(checks.failures)
        checks.run("rubric", _rubric_check(env, trajectory, w))
        rubric_ok = rubric_ok and len(checks.failures) == before
    if not rubric_ok or trajectory.stop_reason == StopReason.MAX_TURNS:
        return None
    _, comps = env.rubric(weights).score(trajectory)
    if comps["outcome"] >= 1.0 - 1e-9:
        return True
    return f"seed {seed} ({trajectory.stop_reason.value}, outcome {comps['outcome']:g})"


def _rubric_check(
    env: Env, trajectory: Trajectory, weights: RewardWeights
) -> Callable[[], list[str]]:
    return lambda: rubric_problems(env.rubric(weights), trajectory, weights)


def _step_after_end(env: Env, trajectory: Trajectory) -> list[str]:
    if trajectory.stop_reason not in (StopReason.TERMINATED, StopReason.TRUNCATED):
        return []
    try:
        env.step(Action(text="<answer>0</answer>"))
    except EpisodeEndedError:
        return []
    except Exception as exc:  # noqa: BLE001
        return [
            f"seed {trajectory.seed}: step after the end raised {type(exc).__name__} ({exc}), "
            "not EpisodeEndedError"
        ]
    return [
        f"seed {trajectory.seed}: step after the end did not raise (expected EpisodeEndedError)"
    ]


def _snapshot_round_trip(
    make_env: Callable[[], Env], seed: int, max_turns: int
) -> list[str] | None:
    """Problems of snapshot/restore on one oracle episode; None when the env has no snapshots."""
    env, other = make_env(), make_env()
    try:
        env.reset(seed=seed)
        try:
            env.snapshot()
        except SnapshotNotSupportedError:
            return None
        after_steps: list[Any] = []
        trajectory = play_oracle(
            env, seed, max_turns=max_turns, on_step=lambda r, i: after_steps.append(env.snapshot())
        )
        env.reset(seed=seed, options={"trajectory_id": f"check-{seed}"})
        snapshots = [env.snapshot(), *after_steps]  # snapshots[i]: the state before turn i
        problems = []
        for i, turn in enumerate(trajectory.turns):
            for target in (env, other):
                target.restore(snapshots[i])
                obs, reward, *_ = target.step(turn.action)
                recorded = turn.observation.messages if turn.observation else ()
                same_reward = float(reward) == turn.reward or (
                    math.isnan(reward) and math.isnan(turn.reward)
                )
                if obs.messages != recorded or not same_reward:
                    which = "the same env" if target is env else "a fresh env"
                    problems.append(
                        f"seed {seed}: after restoring the snapshot of turn {i} into {which}, the oracle's "
                        "action gave another observation or reward than recorded"
                    )
        return problems
    finally:
        env.close()
        other.close()


def _snapshot_round_trip_or_failure(
    make_env: Callable[[], Env], seed: int, max_turns: int
) -> list[str] | None:
    try:
        return _snapshot_round_trip(make_env, seed, max_turns)
    except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
        return [f"seed {seed}: raised {type(exc).__name__}: {exc}"]


def _close_twice(make_env: Callable[[], Env]) -> list[str]:
    env = make_env()
    env.reset(seed=0)
    env.close()
    env.close()
    return []


def check_env(
    env_or_id: str | Env | Callable[[], Env],
    seeds: Iterable[int] = range(3),
    *,
    env_kwargs: dict[str, Any] | None = None,
    max_turns: int = 200,
    weights: RewardWeights = RewardWeights(),
    min_oracle_success: float | None = None,
) -> CheckReport:
    """Run every check of the module docstring on an env; raise if any fails.

    Args:
        env_or_id: a registered id (built with ``make(id, **env_kwargs)``), a zero-argument
            factory returning a fresh env, or an env instance (its class is called with no
            arguments for the checks that need fresh instances).
        seeds: seeds for the determinism, oracle and rubric checks (at least one).
        env_kwargs: constructor arguments when ``env_or_id`` is an id.
        max_turns: most oracle turns per episode.
        weights: group weights of the rubric check (a second, non-default set is also used).
        min_oracle_success: fraction of seeds the oracle must solve; None takes the env's
            declared ``oracle_expected_success`` (binomial test, see the module docstring) or
            its ``oracle_min_success`` attribute (default 1.0: full success). Only envs whose
            outcome is partly chance (e.g. slippery ice) should lower it.

    Returns:
        a :class:`CheckReport` (every check passed).

    Raises:
        EnvCheckError: one or more checks failed; its ``failures`` and message list them all.
        UnknownEnvError: the id is not registered.
        ValueError: ``seeds`` is empty.
    """
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("check_env needs at least one seed")
    env_id, make_env = _factory(env_or_id, env_kwargs or {})
    checks = _Checks()
    try:
        make_env().close()
    except AgenticRLError:
        raise  # e.g. UnknownEnvError: a user error, not a broken env
    except Exception as exc:  # noqa: BLE001
        checks.fail("make", f"building the env raised {type(exc).__name__}: {exc}")
    if checks.failures:
        raise EnvCheckError(env_id, checks.failures)
    checks.run("step_before_reset", lambda: _step_before_reset(make_env))
    checks.run("reset_determinism", lambda: _determinism(make_env, seeds))
    success, expected = _oracle_and_rubric(
        checks, make_env, seeds, max_turns, weights, min_oracle_success
    )
    # the round trip replays the oracle's episode: only meaningful once the checks above passed
    snapshot_problems = (
        None if checks.failures else _snapshot_round_trip_or_failure(make_env, seeds[0], max_turns)
    )
    if snapshot_problems is not None:
        checks.run("snapshot", lambda: snapshot_problems)
    checks.run("close", lambda: _close_twice(make_env))
    if "make" not in checks.passed:
        checks.passed.insert(0, "make")
    if checks.failures:
        raise EnvCheckError(env_id, checks.failures)
    return CheckReport(
        env_id, seeds, tuple(c for c in CHECKS if c in checks.passed), success, expected
    )


def _factory(
    env_or_id: str | Env | Callable[[], Env], kwargs: dict[str, Any]
) -> tuple[str, Callable[[], Env]]:
    if isinstance(env_or_id, str):
        from agentic_rl.envs.registry import make

        return env_or_id, lambda: make(env_or_id, **kwargs)
    if isinstance(env_or_id, Env):
        instance, cls = env_or_id, type(env_or_id)

        def fresh() -> Env:
            env = cls()
            env.env_id = instance.env_id
            return env

        return instance.env_id, fresh
    if callable(env_or_id):
        return "", env_or_id
    raise TypeError(
        f"check_env takes an env id, an Env or a factory, got {type(env_or_id).__name__}"
    )
