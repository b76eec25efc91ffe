"""Trajectories: exact JSON records of episodes and a crash-safe, append-only JSON Lines store.

``trajectory_to_record``/``trajectory_from_record`` convert a ``Trajectory`` to a plain dict and
back without loss; ``TrajectoryStore`` appends such records to a ``.jsonl`` file that DuckDB,
pandas and HF datasets read directly. This package imports only ``agentic_rl.types`` and the
standard library.
"""

from agentic_rl.trajectories.serialize import (
    SCHEMA_VERSION,
    trajectory_from_record,
    trajectory_to_record,
)
from agentic_rl.trajectories.store import TrajectoryStore

__all__ = [
    "SCHEMA_VERSION",
    "TrajectoryStore",
    "trajectory_from_record",
    "trajectory_to_record",
]
