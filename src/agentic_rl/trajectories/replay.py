"""Replay a recorded trajectory: env determinism, rescoring, and policy drift.

* :func:`replay` re-runs the recorded actions in a fresh env built from the recorded env id,
  seed and kwargs (the caller hands in the env, so this module needs no env registry), and
  compares each observation, reward and end-of-episode flag with the recording. The first turn
  whose answer differs is the first divergence: env non-determinism (wall clock, unseeded
  randomness, external state) or an env changed since the recording.
* :func:`rescore` applies a rubric (the current code's) to the recorded trajectory and
  reports how the total and each component moved.
* :func:`logprob_drift` compares the recorded sampling logprobs with logprobs recomputed under
  another policy (a later checkpoint): the mean and max absolute difference over the sampled
  tokens, i.e. how far the policy moved on this trajectory's own actions.

Only ``agentic_rl.types`` is imported; the CLI wires in ``envs.make``, the env's rubric and the
trainer's scoring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentic_rl.types import Message, Observation, StopReason, Trajectory


class _Env(Protocol):
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict]: ...

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, dict]: ...


class _Rubric(Protocol):
    def apply(self, trajectory: Trajectory) -> Trajectory: ...


@dataclass(frozen=True)
class Divergence:
    """One difference between the recording and the replay.

    Attributes:
        turn: 0-based turn whose env answer differs; -1 for the reset observation.
        what: ``observation``, ``reward``, ``tool_results``, ``terminated``, ``truncated`` or
            ``exception`` (the env raised where the recording has none).
        recorded, replayed: the two values (as plain data).
    """

    turn: int
    what: str
    recorded: Any
    replayed: Any


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of :func:`replay`: turns replayed and the differences of the first divergent turn."""

    trajectory_id: str
    turns_replayed: int
    divergences: tuple[Divergence, ...] = ()

    @property
    def first_divergent_turn(self) -> int | None:
        """The first turn that diverged (-1: the reset observation), or None when none did."""
        return self.divergences[0].turn if self.divergences else None


def _messages(messages: Sequence[Message]) -> list[list[str]]:
    return [[m.role, m.content] for m in messages]


def _reset_messages(traj: Trajectory) -> tuple[Message, ...]:
    """The recorded reset observation: the messages before the first assistant message."""
    for i, m in enumerate(traj.messages):
        if m.role == "assistant":
            return traj.messages[:i]
    return traj.messages


def replay(trajectory: Trajectory, env: _Env) -> ReplayResult:
    """Feed the recorded actions to ``env`` and compare every answer with the recording.

    Replay stops after the first turn that differs (later actions were chosen for a world the
    env no longer shows), reporting every difference of that turn. A last turn cut by the token
    budget (``Turn.truncated``) is not stepped, as in the recording, and counts as replayed.

    Args:
        trajectory: the recording.
        env: a fresh env built like the recorded one (``make(env_id, **env_kwargs)``); it is
            reset with the recorded seed and stepped, never closed.
    """
    tid = trajectory.trajectory_id
    try:
        obs, _info = env.reset(seed=trajectory.seed, options={"trajectory_id": tid})
    except Exception as exc:  # noqa: BLE001 - a raising env is a divergence, not a crash of the replay
        return ReplayResult(
            tid, 0, (Divergence(-1, "exception", None, f"{type(exc).__name__}: {exc}"),)
        )
    recorded_reset = _reset_messages(trajectory)
    if tuple(obs.messages) != recorded_reset:
        return ReplayResult(
            tid,
            0,
            (Divergence(-1, "observation", _messages(recorded_reset), _messages(obs.messages)),),
        )
    last = len(trajectory.turns) - 1
    for turn in trajectory.turns:
        if turn.truncated:  # a reply cut by the token budget was never given to the env
            break
        try:
            obs, reward, terminated, truncated, info = env.step(turn.action)
        except Exception as exc:  # noqa: BLE001
            if trajectory.stop_reason == StopReason.ERROR and turn.index == last:
                return ReplayResult(tid, turn.index + 1)  # the recording failed here too
            return ReplayResult(
                tid,
                turn.index,
                (Divergence(turn.index, "exception", None, f"{type(exc).__name__}: {exc}"),),
            )
        found = _compare_turn(
            trajectory, turn, obs, reward, terminated, truncated, info, turn.index == last
        )
        if found:
            return ReplayResult(tid, turn.index + 1, tuple(found))
    return ReplayResult(tid, len(trajectory.turns))


def _compare_turn(
    traj: Trajectory,
    turn: Any,
    obs: Observation,
    reward: float,
    terminated: bool,
    truncated: bool,
    info: dict,
    is_last: bool,
) -> list[Divergence]:
    out = []
    recorded = turn.observation.messages if turn.observation is not None else ()
    if tuple(obs.messages) != tuple(recorded):
        out.append(
            Divergence(turn.index, "observation", _messages(recorded), _messages(obs.messages))
        )
    if not _same_float(float(reward), turn.reward):
        out.append(Divergence(turn.index, "reward", turn.reward, float(reward)))
    results = obs.tool_results
    if results != turn.tool_results:
        out.append(
            Divergence(
                turn.index,
                "tool_results",
                [r.__dict__ for r in turn.tool_results],
                [r.__dict__ for r in results],
            )
        )
    want_terminated = is_last and traj.stop_reason == StopReason.TERMINATED
    want_truncated = is_last and traj.stop_reason == StopReason.TRUNCATED
    if bool(terminated) != want_terminated:
        out.append(Divergence(turn.index, "terminated", want_terminated, bool(terminated)))
    if bool(truncated) != want_truncated and not terminated:
        out.append(Divergence(turn.index, "truncated", want_truncated, bool(truncated)))
    return out


def _same_float(a: float | None, b: float | None, tol: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol) or (math.isnan(a) and math.isnan(b))


@dataclass(frozen=True)
class RescoreResult:
    """Recorded vs recomputed reward of one trajectory.

    Attributes:
        reward_recorded, reward_now: the totals (None when unscored or the rubric failed).
        components: ``{name: (recorded, now)}`` for every component in either (None = absent).
        changed: names whose value differs (plus ``"total"`` when the total does).
        failure: the rubric's failure message when it could not score the trajectory.
    """

    reward_recorded: float | None
    reward_now: float | None
    components: dict[str, tuple[float | None, float | None]]
    changed: tuple[str, ...]
    failure: str | None = None


def rescore(trajectory: Trajectory, rubric: _Rubric) -> RescoreResult:
    """Score ``trajectory`` again with ``rubric`` (e.g. the env's current default rubric)."""
    now = rubric.apply(trajectory)
    names = list(dict.fromkeys([*trajectory.reward_components, *now.reward_components]))
    components = {
        n: (trajectory.reward_components.get(n), now.reward_components.get(n)) for n in names
    }
    changed = [n for n, (a, b) in components.items() if not _same_float(a, b)]
    if not _same_float(trajectory.reward, now.reward):
        changed.append("total")
    failure = now.failure if now.failed and not trajectory.failed else None
    return RescoreResult(trajectory.reward, now.reward, components, tuple(changed), failure)


@dataclass(frozen=True)
class DriftResult:
    """|Δ logprob| between the recorded and recomputed logprobs of the sampled tokens.

    Attributes:
        num_tokens: N, the sampled tokens compared.
        mean_abs: (1/N) Σ |new − old| (nats); 0.0 when N = 0.
        max_abs: max |new − old| (nats); 0.0 when N = 0.
        mean_diff: (1/N) Σ (new − old): > 0 when the new policy makes its old actions likelier.
    """

    num_tokens: int
    mean_abs: float
    max_abs: float
    mean_diff: float = 0.0
    per_token: tuple[float, ...] = field(default=(), repr=False)


def logprob_drift(trajectory: Trajectory, new_logprobs: Sequence[float]) -> DriftResult:
    """Compare ``new_logprobs`` with the recorded logprobs at the sampled positions.

    Args:
        trajectory: the recording; its sampled tokens are those with ``loss_mask == 1``.
        new_logprobs: shape [N], one logprob per sampled token, in stream order (as the
            trainer's scoring returns them).

    Raises:
        ValueError: ``len(new_logprobs)`` is not the number of sampled tokens.
    """
    old = [lp for lp, m in zip(trajectory.logprobs, trajectory.loss_mask) if m == 1]
    if len(new_logprobs) != len(old):
        raise ValueError(f"{len(new_logprobs)} recomputed logprobs for {len(old)} sampled tokens")
    diff = tuple(float(n) - float(o) for n, o in zip(new_logprobs, old))
    if not diff:
        return DriftResult(0, 0.0, 0.0)
    absdiff = [abs(d) for d in diff]
    return DriftResult(
        len(diff), sum(absdiff) / len(diff), max(absdiff), sum(diff) / len(diff), diff
    )
