"""Trajectories as first-class data: exact records, a crash-safe Parquet store, replay, viewer, export.

``trajectory_to_record``/``trajectory_from_record`` convert a ``Trajectory`` to a plain dict and
back without loss; ``TrajectoryStore`` appends such records as atomic Parquet shards that
DuckDB, pandas and HF datasets read directly. The store needs ``pyarrow``; replay, the viewer
and export live in their own modules. This package imports only ``agentic_rl.types`` (and
``agentic_rl.errors``), the standard library and pyarrow: replay is handed its env factory.
"""

from agentic_rl.trajectories.serialize import (
    SCHEMA_VERSION,
    trajectory_from_record,
    trajectory_to_record,
)
from agentic_rl.trajectories.store import RUN_STORE_DIRNAME, TrajectoryStore, open_run_store

__all__ = [
    "RUN_STORE_DIRNAME",
    "SCHEMA_VERSION",
    "TrajectoryStore",
    "open_run_store",
    "trajectory_from_record",
    "trajectory_to_record",
]
