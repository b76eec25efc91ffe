"""Memory metrics computed from trajectories: writes, reads, hit rate, store size, tokens, junk.

Every function reads a finished :class:`~agentic_rl.types.Trajectory` whose env put the
memory toolkit's events on each step's observation (``Observation.memory_events``, copied to
``Turn.memory_events``; see :mod:`agentic_rl.memory.tools`); a trajectory without memory
events scores 0 everywhere. Each one is a valid rubric function (``fn(trajectory) -> float``,
amount >= 0), so an env can log them as zero-weight rubric components (``reward/<name>`` in
the metrics) or weight them as costs.

==================  =====================================================================
function            value
==================  =====================================================================
memory_writes       successful ``memory_write`` calls
memory_reads        successful ``memory_search`` calls
memory_updates      successful ``memory_update`` calls
memory_deletes      successful ``memory_delete`` calls
memory_ops          all memory calls, failed ones included (the cost of using memory)
memory_hit_rate     fraction of successful searches that returned >= 1 entry (0 if none)
memory_store_size   entries in the store after the last memory call (0 if none)
unused_writes       entries written in the episode that no later search returned and that
                    were not deleted: store growth without later use (junk writes)
memory_tokens       tokens spent on memory: the sampled tokens of turns with memory calls
                    plus the environment tokens that brought their results back (the next
                    turn's loss-mask-0 prefix, unless that turn starts a new context after
                    ``Turn.context_reset``); a turn mixing memory and other calls counts
                    the memory share of its calls
==================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Iterator

from agentic_rl.memory.tools import MEMORY_TOOL_NAMES
from agentic_rl.types import MemoryEvent, Trajectory

__all__ = [
    "memory_events",
    "memory_writes",
    "memory_reads",
    "memory_updates",
    "memory_deletes",
    "memory_ops",
    "memory_hit_rate",
    "memory_store_size",
    "unused_writes",
    "memory_tokens",
]


def memory_events(trajectory: Trajectory) -> Iterator[MemoryEvent]:
    """All memory events of the trajectory (``Turn.memory_events``), in order.

    Raises:
        TypeError: a turn's ``memory_events`` holds something other than ``MemoryEvent`` values
            (a broken env fails the trajectory loudly instead of scoring 0).
    """
    for turn in trajectory.turns:
        if not all(isinstance(e, MemoryEvent) for e in turn.memory_events):
            raise TypeError(
                f"turn {turn.index}: memory_events must be MemoryEvent values, "
                f"got {turn.memory_events!r}"
            )
        yield from turn.memory_events


def _count(trajectory: Trajectory, op: str) -> float:
    return float(sum(e.op == op and e.ok for e in memory_events(trajectory)))


def memory_writes(trajectory: Trajectory) -> float:
    """Successful ``memory_write`` calls. Raises as :func:`memory_events`."""
    return _count(trajectory, "write")


def memory_reads(trajectory: Trajectory) -> float:
    """Successful ``memory_search`` calls. Raises as :func:`memory_events`."""
    return _count(trajectory, "search")


def memory_updates(trajectory: Trajectory) -> float:
    """Successful ``memory_update`` calls. Raises as :func:`memory_events`."""
    return _count(trajectory, "update")


def memory_deletes(trajectory: Trajectory) -> float:
    """Successful ``memory_delete`` calls. Raises as :func:`memory_events`."""
    return _count(trajectory, "delete")


def memory_ops(trajectory: Trajectory) -> float:
    """All memory calls, successful or not (a cost). Raises as :func:`memory_events`."""
    return float(sum(1 for _ in memory_events(trajectory)))


def memory_hit_rate(trajectory: Trajectory) -> float:
    """Fraction of successful searches that returned at least one entry; 0 without searches."""
    searches = [e for e in memory_events(trajectory) if e.op == "search" and e.ok]
    return sum(e.hits > 0 for e in searches) / len(searches) if searches else 0.0


def memory_store_size(trajectory: Trajectory) -> float:
    """Entries in the store after the episode's last memory call; 0 without memory calls."""
    size = 0
    for event in memory_events(trajectory):
        size = event.store_size
    return float(size)


def unused_writes(trajectory: Trajectory) -> float:
    """Entries written in the episode, never returned by a later search, and not deleted (junk)."""
    written: list[int] = []
    used: set[int] = set()
    for event in memory_events(trajectory):
        if not event.ok:
            continue
        ids = list(event.entry_ids)
        if event.op == "write":
            written.extend(ids)
        elif event.op in ("search", "delete"):
            used.update(ids)
    return float(sum(i not in used for i in written))


def memory_tokens(trajectory: Trajectory) -> float:
    """Tokens spent on memory (definition in the module docstring)."""
    total = 0.0
    turns = trajectory.turns
    for i, turn in enumerate(turns):
        calls = turn.action.tool_calls
        n_memory = sum(c.name in MEMORY_TOOL_NAMES for c in calls)
        if not n_memory:
            continue
        spent = turn.num_generated_tokens
        if i + 1 < len(turns) and not turn.context_reset:
            mask = turns[i + 1].loss_mask
            spent += next((j for j, m in enumerate(mask) if m), len(mask))
        total += spent * n_memory / len(calls)
    return total
