"""Roll an episode back to an earlier turn: the env's state and the trajectory, cut consistently.

Given an env and a recorded :class:`~agentic_rl.types.Trajectory` of ``n`` turns,
``rollback(env, trajectory, k)`` (``0 <= k <= n``) brings the env to its state after turn ``k``
(after ``reset`` for ``k = 0``) and returns the trajectory cut to its first ``k`` turns. Two
ways to get the env there:

* **snapshots** (``snapshots=`` a list where ``snapshots[i]`` is ``env.snapshot()`` taken after
  ``i`` turns, e.g. by a caller that steps the env itself): ``env.restore(snapshots[k])``.
  Works for envs whose state is not a function of the actions alone.
* **replay** (default): ``env.reset(seed=trajectory.seed)`` and ``env.step`` with the recorded
  actions of turns ``0 .. k-1``, checking that every observation and reward equals the recorded
  one; a difference raises :class:`ReplayMismatchError` (the env is not deterministic given seed
  and actions, so the state reached is not the recorded one). Tool calls run again (and are
  audited again, under the trajectory's id).

The cut trajectory is what the policy would be fed before sampling turn ``k``: turns
``0 .. k-1`` with their token spans, followed by the context tokens of turn ``k`` (the env's
answer to turn ``k-1`` and the next assistant header; for ``k = 0`` the prompt), which are
``loss_mask`` 0. ``token_ids``, ``loss_mask`` and ``logprobs`` are cut at the same index, the
messages likewise. The reward is unset and the components emptied (the cut trajectory must be
scored again); for ``k < n`` the stop reason is ``MAX_TURNS`` (a budget of ``k`` turns ended it)
and ``info["rollback"] = {"from_turns": n, "to_turns": k}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.types import Message, StopReason, Trajectory

__all__ = ["ReplayMismatchError", "rollback", "truncate_trajectory"]


class ReplayMismatchError(RuntimeError):
    """Replaying the recorded actions did not reproduce the recorded observations or rewards."""


def _initial_message_count(trajectory: Trajectory) -> int:
    """Number of messages of the first observation (system, task, ...) at the start of ``messages``."""
    turns, messages = trajectory.turns, trajectory.messages
    if not turns:
        return len(messages)
    per_turn = [1 + (len(t.observation.messages) if t.observation else 0) for t in turns]
    # the engine leaves out the last turn's answer when the token budget ran out right after it
    for appended in (sum(per_turn), sum(per_turn[:-1]) + 1):
        start = len(messages) - appended
        if start >= 0 and messages[start] == Message("assistant", turns[0].action.text):
            return start
    raise ValueError(f"trajectory {trajectory.trajectory_id}: its messages do not match its turns")


def _context_length(mask: Sequence[int]) -> int:
    """Length of the leading loss_mask-0 run (the context fed before the turn's sampled tokens)."""
    for i, m in enumerate(mask):
        if m:
            return i
    return len(mask)


def truncate_trajectory(trajectory: Trajectory, k: int) -> Trajectory:
    """The trajectory cut to its first ``k`` turns (see the module docstring for what it holds).

    Shapes: the result's ``token_ids``, ``loss_mask`` and ``logprobs`` have one common length
    ``T_k = sum(len(turn.token_ids) for the first k turns) + C_k``, where ``C_k`` is the length
    of turn ``k``'s leading ``loss_mask``-0 run (0 when ``k = n``, and then any trailing tokens
    are kept).

    Raises:
        ValueError: ``k`` is outside ``0 .. len(turns)``, or the trajectory's token stream or
            messages do not match its turns.
    """
    n = len(trajectory.turns)
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"turn index k must be an integer in 0..{n}, got {k!r}")
    if k == n:
        return trajectory
    if not len(trajectory.token_ids) == len(trajectory.loss_mask) == len(trajectory.logprobs):
        raise ValueError(
            f"trajectory {trajectory.trajectory_id}: token_ids, loss_mask and logprobs differ in length"
        )
    kept = trajectory.turns[:k]
    spans = [i for t in kept for i in t.token_ids]
    length = len(spans) + _context_length(trajectory.turns[k].loss_mask)
    if tuple(spans) != trajectory.token_ids[: len(spans)] or length > len(trajectory.token_ids):
        raise ValueError(
            f"trajectory {trajectory.trajectory_id}: its token stream does not match its turns' spans"
        )
    start = _initial_message_count(trajectory)
    messages = list(trajectory.messages[:start])
    for turn in kept:
        messages.append(Message("assistant", turn.action.text))
        messages.extend(turn.observation.messages if turn.observation else ())
    return dataclasses.replace(
        trajectory,
        messages=tuple(messages),
        turns=kept,
        token_ids=trajectory.token_ids[:length],
        loss_mask=trajectory.loss_mask[:length],
        logprobs=trajectory.logprobs[:length],
        segment_starts=tuple(s for s in trajectory.segment_starts if s < length) or (0,),
        stop_reason=StopReason.MAX_TURNS,
        reward=None,
        reward_components={},
        info={**trajectory.info, "rollback": {"from_turns": n, "to_turns": k}},
    )


def rollback(
    env: Env, trajectory: Trajectory, k: int, *, snapshots: Sequence[Any] | None = None
) -> Trajectory:
    """Bring ``env`` to its state after turn ``k`` of ``trajectory`` and return the cut trajectory.

    Args:
        env: an env of the trajectory's id (its current episode is abandoned).
        trajectory: a recorded episode (e.g. from :func:`~agentic_rl.rollout.run_episodes`).
        k: number of turns to keep, ``0 .. len(trajectory.turns)``.
        snapshots: ``snapshots[i]`` = the env's snapshot after ``i`` turns of this episode;
            None replays the recorded actions instead.

    Raises:
        ValueError: ``k`` out of range, the env id differs from the trajectory's, fewer than
            ``k + 1`` snapshots, or an inconsistent trajectory.
        ReplayMismatchError: (replay) an observation or reward differs from the recorded one,
            or the env raised.
        SnapshotNotSupportedError: (snapshots) the env cannot restore.
    """
    cut = truncate_trajectory(trajectory, k)
    if env.env_id and trajectory.env_id and env.env_id != trajectory.env_id:
        raise ValueError(
            f"env {env.env_id!r} cannot roll back a trajectory of {trajectory.env_id!r}"
        )
    if snapshots is not None:
        if len(snapshots) <= k:
            raise ValueError(
                f"rolling back to turn {k} needs snapshots[{k}]; got {len(snapshots)} snapshots"
            )
        env.restore(snapshots[k])
        return cut
    _replay(env, trajectory, k)
    return cut


def _replay(env: Env, trajectory: Trajectory, k: int) -> None:
    start = _initial_message_count(trajectory)
    tid = trajectory.trajectory_id
    try:
        obs, _ = env.reset(seed=trajectory.seed, options={"trajectory_id": tid})
    except Exception as exc:
        raise ReplayMismatchError(
            f"trajectory {tid}: reset raised {type(exc).__name__}: {exc}"
        ) from exc
    if obs.messages != trajectory.messages[:start]:
        raise ReplayMismatchError(
            f"trajectory {tid}: reset(seed={trajectory.seed}) gave a different first observation"
        )
    for turn in trajectory.turns[:k]:
        try:
            obs, reward, _, _, _ = env.step(turn.action)
        except Exception as exc:
            raise ReplayMismatchError(
                f"trajectory {tid}, turn {turn.index}: step raised {type(exc).__name__}: {exc}"
            ) from exc
        recorded = turn.observation.messages if turn.observation else ()
        if obs.messages != recorded:
            diff = next(
                (i for i, (a, b) in enumerate(zip(obs.messages, recorded)) if a != b),
                min(len(obs.messages), len(recorded)),
            )
            raise ReplayMismatchError(
                f"trajectory {tid}, turn {turn.index}: observation differs from the recorded one "
                f"(message {diff}: got {obs.messages[diff : diff + 1]!r}, "
                f"recorded {recorded[diff : diff + 1]!r})"
            )
        if float(reward) != turn.reward:
            raise ReplayMismatchError(
                f"trajectory {tid}, turn {turn.index}: reward {reward} != recorded {turn.reward}"
            )
