"""Read the per-turn quantities credit assignment needs off a :class:`~agentic_rl.types.Trajectory`.

Every env gets these without writing anything special:

- **turn rewards** r_k (:func:`turn_rewards`): the env's own per-step rewards ``Turn.reward``
  where it gives them, with the rest of the scored rubric total put on the last turn, so that
  Σ_k r_k = R (the trajectory reward) exactly. For an env that only rewards the final answer
  (``calculator-v0``) this is R on the last turn and 0 before (sparse outcome reward).
- **process rewards** p_k (:func:`turn_process_rewards`): ``Turn.process_reward`` when
  the env reports one for the turn; otherwise a generic tool-health signal every env has,
  −(failed or rejected tool calls) / (all tool calls of the turn), 0 for a turn
  without tool calls. It only penalises broken calls, so it cannot be farmed by calling tools.
- **anchor keys** (:func:`anchor_keys`): the observation each turn acted on — for turn 0 the
  messages before the first assistant reply, for turn k > 0 the observation returned after
  turn k − 1 (e.g. the tool results). GiGPO groups turns with equal keys.
- **token ↔ turn map** (:func:`token_turn_index`): which turn each token of the flat stream
  belongs to (the turns' spans are consecutive; trailing environment tokens get −1).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from agentic_rl.types import Trajectory

__all__ = [
    "anchor_keys",
    "pad_turns",
    "token_turn_index",
    "turn_process_rewards",
    "turn_rewards",
]


def turn_rewards(trajectory: Trajectory) -> list[float]:
    """Per-turn rewards r_0..r_{K−1} summing to the trajectory's scored reward R.

    r_k = Turn.reward_k for k < K − 1 and r_{K−1} = R − Σ_{k<K−1} Turn.reward_k.

    Raises:
        ValueError: the trajectory is not scored (reward None) or has no turns.
    """
    if trajectory.reward is None:
        raise ValueError(f"trajectory {trajectory.trajectory_id} is not scored (reward is None)")
    if not trajectory.turns:
        raise ValueError(f"trajectory {trajectory.trajectory_id} has no turns")
    early = [float(t.reward) for t in trajectory.turns[:-1]]
    return early + [float(trajectory.reward) - sum(early)]


def turn_process_rewards(trajectory: Trajectory) -> list[float]:
    """Per-turn process rewards p_k (see the module docstring for the fallback signal).

    Raises:
        ValueError: an env-given process reward is not a finite number.
    """
    out = []
    for turn in trajectory.turns:
        if turn.process_reward is not None:
            value = turn.process_reward
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise ValueError(
                    f"turn {turn.index} of {trajectory.trajectory_id}: process_reward must be a "
                    f"finite number, got {value!r}"
                )
            out.append(float(value))
            continue
        # rejected calls usually also come back as failed results: count each failure once
        rejected = len(turn.action.tool_call_errors)
        failed = max(sum(not r.ok for r in turn.tool_results), rejected)
        calls = max(len(turn.tool_results), len(turn.action.tool_calls) + rejected)
        out.append(-min(failed, calls) / calls if calls else 0.0)
    return out


def anchor_keys(trajectory: Trajectory) -> list[Hashable]:
    """One hashable key per turn: the observation the turn acted on (role/content tuples)."""
    initial: list[tuple[str, str]] = []
    for m in trajectory.messages:
        if m.role == "assistant":
            break
        initial.append((m.role, m.content))
    keys: list[Hashable] = []
    for k in range(len(trajectory.turns)):
        if k == 0:
            keys.append(("initial", tuple(initial)))
        else:
            obs = trajectory.turns[k - 1].observation
            keys.append(
                ("observation", tuple((m.role, m.content) for m in obs.messages) if obs else ())
            )
    return keys


def token_turn_index(trajectory: Trajectory) -> list[int]:
    """Turn index of each token of ``trajectory.token_ids`` (−1 after the last turn's span).

    Raises:
        ValueError: the turns' spans are longer than the token stream.
    """
    out: list[int] = []
    for k, turn in enumerate(trajectory.turns):
        out.extend([k] * len(turn.token_ids))
    if len(out) > len(trajectory.token_ids):
        raise ValueError(
            f"trajectory {trajectory.trajectory_id}: turn spans exceed the token stream"
        )
    return out + [-1] * (len(trajectory.token_ids) - len(out))


def pad_turns(
    rows: Sequence[Sequence[float]], dtype: torch.dtype = torch.float64
) -> tuple[Tensor, Tensor]:
    """Left-aligned padding of per-turn lists into ``(values [N, K], turn_mask [N, K] bool)``."""
    width = max((len(r) for r in rows), default=0)
    values = torch.zeros((len(rows), width), dtype=dtype)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        values[i, : len(r)] = torch.tensor(list(r), dtype=dtype)
        mask[i, : len(r)] = True
    return values, mask
