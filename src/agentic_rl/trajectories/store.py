"""An append-only, crash-safe trajectory store over one JSON Lines file.

Format: UTF-8 JSON Lines (https://jsonlines.org). Each line is one JSON object, usually a
trajectory record from ``trajectory_to_record`` with extra keys such as ``run``, ``step``,
``phase`` and ``advantage`` at the top level; every line ends with ``"\\n"``. Non-ASCII text
is ``\\u``-escaped, so no record ever contains a raw line break. The file is an open format:
``duckdb.read_json("trajectories.jsonl")``, ``pandas.read_json(path, lines=True)`` and
``datasets.load_dataset("json", data_files=path)`` all read it directly.

Crash-safety guarantees (one writer process per file):

* ``append`` serialises the whole batch first (a record that is not JSON-serialisable raises
  before anything is written), then writes it with a single ``write`` call, flushes and
  ``os.fsync``s the file. When ``append`` returns, its lines are on disk.
* A process killed at any moment (SIGKILL, OOM killer, power loss after the last ``fsync``)
  leaves every completed line intact and readable. At worst the file ends with one partial
  line: the tail of the batch that was being written.
* Opening a store for writing repairs that tail: a trailing fragment that is not a complete
  JSON object is truncated (with a warning), so later appends start on a clean line. A
  complete object that only lacks its newline (e.g. a file made by another tool) is kept
  and the newline is added.
* Readers never fail on the partial tail: ``read`` skips it. A corrupt line anywhere else
  cannot come from a crash and raises ``ValueError`` with its line number.

Readers of a file that another process is writing should open it with ``read_only=True``,
which never modifies the file (otherwise the repair could cut the writer's line in half).
Several concurrent writers to one file are not supported.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentic_rl.trajectories.serialize import trajectory_from_record, trajectory_to_record
from agentic_rl.types import StopReason, Trajectory

logger = logging.getLogger(__name__)

_CHUNK = 1 << 16


def _parse_object(line: bytes) -> dict[str, Any] | None:
    """Return the JSON object in ``line``, or None when it is not one."""
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


class TrajectoryStore:
    """Append-only JSON Lines store of trajectory records (see the module docstring).

    Args:
        path: the ``.jsonl`` file; it and its parent directories are created when missing
            (unless ``read_only``).
        read_only: never create, repair or write the file; ``append`` raises.

    Raises:
        FileNotFoundError: ``read_only`` and the file does not exist.
    """

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if read_only:
            if not self.path.is_file():
                raise FileNotFoundError(f"trajectory store not found: {self.path}")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            self.path.touch()
            _fsync_dir(self.path.parent)
        self._repair_tail()

    def __repr__(self) -> str:
        return f"TrajectoryStore({str(self.path)!r}, read_only={self.read_only})"

    # -- writing -------------------------------------------------------------------------

    def _repair_tail(self) -> None:
        """Truncate a partial last line left by a crash mid-write (or add a missing newline)."""
        with open(self.path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            start = _last_line_start(f, size)
            f.seek(start)
            tail = f.read(size - start)
            if _parse_object(tail) is not None:
                logger.warning("%s: last line had no newline; adding one", self.path)
                f.seek(size)
                f.write(b"\n")
            else:
                logger.warning(
                    "%s: truncating a partial last line of %d bytes (crash mid-write?)",
                    self.path,
                    size - start,
                )
                f.truncate(start)
            f.flush()
            os.fsync(f.fileno())

    def append(self, records: Iterable[dict[str, Any]]) -> int:
        """Write each record as one JSON line, then flush and ``fsync``; return the count.

        Raises:
            PermissionError: the store was opened ``read_only``.
            TypeError: a record is not a dict, or holds a value JSON cannot encode (nothing
                of the batch is written then).
        """
        if self.read_only:
            raise PermissionError(f"{self!r} is read-only")
        lines = []
        for record in records:
            if not isinstance(record, dict):
                raise TypeError(f"a record must be a dict, got {type(record).__name__}")
            lines.append(json.dumps(record, ensure_ascii=True) + "\n")
        if not lines:
            return 0
        data = "".join(lines).encode("utf-8")
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return len(lines)

    def append_trajectories(self, trajectories: Iterable[Trajectory], **extra: Any) -> int:
        """Append trajectories as records with ``extra`` keys (run, step, phase, ...).

        Raises:
            ValueError: an ``extra`` key collides with a trajectory field.
            PermissionError, TypeError: as ``append``.
        """
        return self.append(trajectory_to_record(t, **extra) for t in trajectories)

    # -- reading -------------------------------------------------------------------------

    def _records(self) -> Iterator[dict[str, Any]]:
        """Every complete record in file order; a partial last line is skipped."""
        with open(self.path, "rb") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                record = _parse_object(line)
                if record is not None:
                    yield record
                elif line.endswith(b"\n"):
                    raise ValueError(f"{self.path}:{number}: not a JSON object line")
                else:
                    logger.debug("%s: skipping partial last line %d", self.path, number)

    def read(
        self,
        *,
        step: int | None = None,
        phase: str | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        stop_reason: StopReason | str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield the records that match every given filter, in file order.

        ``step`` and ``phase`` compare with the record's top-level keys of the same name;
        ``min_reward``/``max_reward`` are inclusive bounds on ``reward`` (records with no
        reward never match a bound); ``stop_reason`` accepts a ``StopReason`` or its value.

        Raises:
            ValueError: a line other than the last one is not a JSON object, or
                ``stop_reason`` is not a ``StopReason`` value.
        """
        reason = None if stop_reason is None else StopReason(stop_reason).value
        for record in self._records():
            if step is not None and record.get("step") != step:
                continue
            if phase is not None and record.get("phase") != phase:
                continue
            reward = record.get("reward")
            has_reward = isinstance(reward, (int, float)) and not isinstance(reward, bool)
            if min_reward is not None and not (has_reward and reward >= min_reward):
                continue
            if max_reward is not None and not (has_reward and reward <= max_reward):
                continue
            if reason is not None and record.get("stop_reason") != reason:
                continue
            yield record

    def read_trajectories(self, **filters: Any) -> Iterator[Trajectory]:
        """Yield ``Trajectory`` objects for the records matching ``filters`` (see ``read``).

        Raises:
            ValueError: as ``read``, or a record is not a valid trajectory record.
        """
        for record in self.read(**filters):
            yield trajectory_from_record(record)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.read()

    def __len__(self) -> int:
        """Number of complete records (a partial last line is not counted)."""
        return sum(1 for _ in self._records())


def _last_line_start(f: Any, size: int) -> int:
    """Offset just after the last ``\\n`` before ``size`` (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        f.seek(start)
        chunk = f.read(end - start)
        idx = chunk.rfind(b"\n")
        if idx != -1:
            return start + idx + 1
        end = start
    return 0


def _fsync_dir(directory: Path) -> None:
    """Make a new file's directory entry durable (best effort; not possible on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
