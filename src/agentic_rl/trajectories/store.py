"""An append-only, crash-safe trajectory store: a folder of Parquet shards.

Layout: ``DIR/part-000001.parquet``, ``DIR/part-000002.parquet``, ... One ``append`` call
writes one shard (the recipe appends once per batch: a warm-up set, an eval, an RL step), in
the fixed schema of :mod:`agentic_rl.trajectories.arrow_schema`. Every tool that reads Parquet
reads the folder as one table::

    duckdb.sql("SELECT env_id, avg(reward) FROM 'runs/x/trajectories/*.parquet' GROUP BY 1")
    pandas.read_parquet("runs/x/trajectories")
    datasets.load_dataset("parquet", data_files="runs/x/trajectories/*.parquet")

Crash-safety (several writer processes may append to one folder; ``delete_where`` needs a
single writer):

* ``append`` converts the whole batch first (a bad record raises before anything is written),
  writes it to ``.part-new.PID.tmp``, ``fsync``s it, hard-links it to the next free
  ``part-NNNNNN.parquet`` (atomic, and never overwrites: two writers never clobber each
  other's shards), removes the temporary name and ``fsync``s the folder. When ``append``
  returns, the shard is durable.
* A process killed at any moment leaves every completed shard whole; the batch being written
  is either entirely there or entirely absent, never a corrupt tail. Readers never see
  temporary files (dot-prefixed, ``.tmp`` suffix: ignored by pyarrow, pandas, DuckDB globs on
  ``*.parquet`` and HF ``datasets``); opening the store for writing deletes leftovers of
  writers that are no longer running.
* ``delete_where`` (used before a resume) rewrites affected shards the same way, so it is
  crash-safe and can simply be run again.

Integrity: ``DIR/_manifest.json`` lists every shard with its row count, size and SHA-256
(updated atomically under an ``flock`` of the folder after each append, rewrite or removal;
the ``_`` prefix keeps it out of pyarrow's, pandas' and DuckDB's ``*.parquet`` reads). Reading
checks it: a listed shard that is gone (lost trajectories), or whose bytes changed (truncated,
zero bytes, a flipped bit), raises :class:`CorruptStoreError` naming the file; so does a shard
that is not valid Parquet. A shard the manifest does not list yet (a writer killed between the
link and the manifest update, or a store written before manifests existed) is read as it is,
and adopted by the next writer that opens the store.

Why Parquet shards rather than one JSON Lines file: columnar, typed (token ids stay int32,
logprobs float64), compressed, filterable without parsing every record (predicates are
pushed down to row groups), and one file per step makes atomic appends trivial.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from agentic_rl.errors import RunDirError
from agentic_rl.trajectories.arrow_schema import SCHEMA, records_to_table, row_to_record
from agentic_rl.trajectories.serialize import trajectory_from_record
from agentic_rl.types import StopReason, Trajectory

_SHARD = re.compile(r"^part-(\d{6,})\.parquet$")
MANIFEST_NAME = "_manifest.json"


class CorruptStoreError(RunDirError):
    """A trajectory shard (or the store's manifest) is missing, truncated, altered or unreadable;
    the message names the file."""


class TrajectoryStore:
    """Append-only Parquet-shard store of trajectory records (see the module docstring).

    Args:
        path: the store's folder; created when missing (unless ``read_only``).
        read_only: never create, clean or write; ``append`` raises.

    Raises:
        FileNotFoundError: ``read_only`` and the folder does not exist.
        NotADirectoryError: ``path`` exists and is not a folder (e.g. an old ``.jsonl`` file).
    """

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(
                f"trajectory store must be a folder of Parquet shards: {self.path}"
            )
        if read_only:
            if not self.path.is_dir():
                raise FileNotFoundError(f"trajectory store not found: {self.path}")
            return
        self.path.mkdir(parents=True, exist_ok=True)
        for leftover in [*self.path.glob(".part-*.tmp"), *self.path.glob("._manifest.*.tmp")]:
            if not _alive(_tmp_pid(leftover)):  # a writer killed between write and rename
                leftover.unlink(missing_ok=True)
        with _locked(self.path):
            self._reconcile()

    def __repr__(self) -> str:
        return f"TrajectoryStore({str(self.path)!r}, read_only={self.read_only})"

    # -- writing -------------------------------------------------------------------------

    def shards(self) -> list[Path]:
        """Completed shards, in append order."""
        found = [(int(m.group(1)), p) for p in self.path.iterdir() if (m := _SHARD.match(p.name))]
        return [p for _, p in sorted(found)]

    def _write_tmp(self, table: pa.Table, name: str) -> Path:
        tmp = self.path / f".{name}.{os.getpid()}.tmp"
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        return tmp

    def _write_shard(self, table: pa.Table, final: Path) -> None:
        """Replace ``final`` atomically (used to rewrite a shard); the manifest first records the
        new version as pending, so a crash at any point leaves a file that one of them matches."""
        tmp = self._write_tmp(table, final.name)
        entry = _entry(tmp, table.num_rows)
        with _locked(self.path):
            old = self._manifest().get(final.name)
            if old is not None:
                self._update_manifest({final.name: {**old, "next": entry}})
            os.replace(tmp, final)
            _fsync_dir(self.path)
            self._update_manifest({final.name: entry})

    def _remove_shard(self, shard: Path) -> None:
        """Delete ``shard``: marked pending in the manifest, unlinked, then unlisted."""
        with _locked(self.path):
            old = self._manifest().get(shard.name)
            if old is not None:
                self._update_manifest({shard.name: {**old, "next": None}})
            shard.unlink()
            _fsync_dir(self.path)
            self._update_manifest({shard.name: None})

    # -- manifest ------------------------------------------------------------------------

    def _manifest(self) -> dict[str, Any]:
        """``{shard name: entry}`` of ``_manifest.json`` ({} when the store has none).

        Raises:
            CorruptStoreError: the manifest is not the JSON this store writes.
        """
        path = self.path / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise CorruptStoreError(f"corrupt trajectory store manifest {path}: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("shards"), dict):
            raise CorruptStoreError(f"corrupt trajectory store manifest {path}: no 'shards' table")
        return data["shards"]

    def _update_manifest(self, changes: dict[str, dict[str, Any] | None]) -> None:
        """Apply ``changes`` (None removes an entry) and replace the manifest atomically.
        The caller holds the folder's lock."""
        shards = self._manifest()
        for name, entry in changes.items():
            if entry is None:
                shards.pop(name, None)
            else:
                shards[name] = entry
        shards = dict(sorted(shards.items()))
        tmp = self.path / f"._manifest.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(
                {"format": "agentic-rl trajectory store", "version": 1, "shards": shards},
                f,
                indent=0,
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / MANIFEST_NAME)
        _fsync_dir(self.path)

    def _reconcile(self) -> None:
        """Finish what a killed writer left (the caller holds the lock): finish pending
        rewrites/removals and list the shards the manifest lacks (after checking they are
        readable Parquet)."""
        manifest = self._manifest()
        on_disk = {p.name: p for p in self.shards()}
        changes: dict[str, dict[str, Any] | None] = {}
        for name, entry in manifest.items():
            if "next" in entry and name not in on_disk and entry["next"] is None:
                changes[name] = None  # removal finished; only the unlisting was left
            elif "next" in entry and name in on_disk:
                _verify(on_disk[name], entry)
                now = (
                    entry["next"]
                    if entry["next"] and _digest(on_disk[name]) == entry["next"]["sha256"]
                    else entry
                )
                changes[name] = {k: v for k, v in now.items() if k != "next"}
        for name, shard in on_disk.items():
            if name not in manifest:
                changes[name] = _entry(shard, _footer(shard).num_rows)
        if changes or (on_disk and not (self.path / MANIFEST_NAME).exists()):
            self._update_manifest(changes)

    def append(self, records: Iterable[dict[str, Any]]) -> int:
        """Write the records as one new shard (atomically); return how many were written.

        Raises:
            PermissionError: the store was opened ``read_only``.
            ValueError: a record lacks a trajectory field or has another ``schema_version``.
            TypeError: a record is not a dict or holds a value the schema cannot store
                (nothing of the batch is written then).
        """
        if self.read_only:
            raise PermissionError(f"{self!r} is read-only")
        table = records_to_table(list(records))
        if table.num_rows == 0:
            return 0
        tmp = self._write_tmp(table, "part-new")
        entry = _entry(tmp, table.num_rows)
        try:
            with _locked(self.path):
                while True:  # link() never overwrites: a shard another writer just took is skipped
                    shards = self.shards()
                    number = int(_SHARD.match(shards[-1].name).group(1)) + 1 if shards else 1
                    try:
                        os.link(tmp, self.path / f"part-{number:06d}.parquet")
                        break
                    except FileExistsError:
                        continue
                _fsync_dir(self.path)
                self._update_manifest({f"part-{number:06d}.parquet": entry})
        finally:
            tmp.unlink(missing_ok=True)
        return table.num_rows

    def delete_where(self, predicate: Callable[[dict[str, Any]], bool]) -> int:
        """Remove every record for which ``predicate(record)`` is true; return how many.

        Each affected shard is rewritten atomically (or removed when nothing is left), so a
        crash leaves each shard either old or new, and running the call again finishes it.

        Raises:
            PermissionError: the store was opened ``read_only``.
        """
        if self.read_only:
            raise PermissionError(f"{self!r} is read-only")
        removed = 0
        for shard in self._checked_shards():
            table = _read_shard(shard)
            keep = [not predicate(row_to_record(row)) for row in table.to_pylist()]
            if all(keep):
                continue
            removed += keep.count(False)
            if any(keep):
                self._write_shard(table.filter(pa.array(keep)), shard)
            else:
                self._remove_shard(shard)
        return removed

    # -- reading -------------------------------------------------------------------------

    def table(self, **filters: Any) -> pa.Table:
        """The matching rows as one Arrow table of :data:`~.arrow_schema.SCHEMA` (see ``read``)."""
        expression = _expression(**filters)
        shards = self._checked_shards()
        if not shards:
            return SCHEMA.empty_table()
        try:
            dataset = ds.dataset([str(p) for p in shards], schema=SCHEMA, format="parquet")
            return dataset.to_table(filter=expression)
        except (pa.ArrowException, OSError):
            for shard in shards:  # name the shard that does not read
                _read_shard(shard)
            raise

    def _checked_shards(self) -> list[Path]:
        """The shards, after checking them against the manifest (see the module docstring).

        Raises:
            CorruptStoreError: a listed shard is missing or its size or SHA-256 differs.
        """
        manifest = self._manifest()
        shards = self.shards()
        on_disk = {p.name for p in shards}
        for name, entry in manifest.items():
            if name not in on_disk and not ("next" in entry and entry["next"] is None):
                raise CorruptStoreError(
                    f"trajectory shard {self.path / name} is missing: the store's {MANIFEST_NAME} lists it with "
                    f"{entry.get('rows')} trajectories (deleted or moved?); restore it, or remove its entry "
                    f"from {self.path / MANIFEST_NAME} to read the rest"
                )
        for shard in shards:
            if shard.name in manifest:
                _verify(shard, manifest[shard.name])
        return shards

    def read(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Yield the records that match every given filter, in append order.

        Filters (all optional, combined with AND): ``run_id``, ``phase``, ``tag``, ``step``,
        ``env_id``, ``trajectory_id``, ``group_id`` (equality); ``min_reward``/``max_reward``
        (inclusive; a record without reward never matches a bound); ``stop_reason`` (a
        ``StopReason`` or its value).

        Raises:
            ValueError: an unknown filter name, or ``stop_reason`` is not a ``StopReason`` value.
        """
        for row in self.table(**filters).to_pylist():
            yield row_to_record(row)

    def read_trajectories(self, **filters: Any) -> Iterator[Trajectory]:
        """Yield ``Trajectory`` objects for the records matching ``filters`` (see ``read``)."""
        for record in self.read(**filters):
            yield trajectory_from_record(record)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.read()

    def __len__(self) -> int:
        """Number of stored records (shard footers only; no data is read)."""
        return sum(_footer(p).num_rows for p in self._checked_shards())


_EQUALITY = ("run_id", "phase", "tag", "step", "env_id", "trajectory_id", "group_id")


def _expression(
    *,
    min_reward: float | None = None,
    max_reward: float | None = None,
    stop_reason: StopReason | str | None = None,
    **equal: Any,
) -> pc.Expression | None:
    """The pyarrow filter expression of ``TrajectoryStore.read``'s filters (None: no filter)."""
    unknown = sorted(set(equal) - set(_EQUALITY))
    if unknown:
        raise ValueError(
            f"unknown trajectory filter(s) {unknown}; known: {sorted(_EQUALITY)}, "
            "min_reward, max_reward, stop_reason"
        )
    terms = [pc.field(k) == v for k, v in equal.items() if v is not None]
    if min_reward is not None:
        terms.append(pc.field("reward") >= float(min_reward))
    if max_reward is not None:
        terms.append(pc.field("reward") <= float(max_reward))
    if stop_reason is not None:
        terms.append(pc.field("stop_reason") == StopReason(stop_reason).value)
    expr = None
    for term in terms:
        expr = term if expr is None else expr & term
    return expr


def _digest(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes; cached per (path, size, mtime) within the process."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _DIGESTS:
        with open(path, "rb") as f:
            _DIGESTS[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def _entry(path: Path, rows: int) -> dict[str, Any]:
    """The manifest entry of a shard file: rows, bytes, sha256."""
    return {"rows": int(rows), "bytes": path.stat().st_size, "sha256": _digest(path)}


def _verify(shard: Path, entry: dict[str, Any]) -> None:
    """Check a shard against its manifest entry (or the pending version of a rewrite).

    Raises:
        CorruptStoreError: neither matches (the message names the file and what differs).
    """
    versions = [entry] + ([entry["next"]] if isinstance(entry.get("next"), dict) else [])
    size = shard.stat().st_size
    if not any(v.get("bytes") == size for v in versions):
        raise CorruptStoreError(
            f"corrupt trajectory shard {shard}: {size} bytes, the manifest says "
            f"{entry.get('bytes')} (truncated or overwritten?)"
        )
    if not any(v.get("sha256") == _digest(shard) for v in versions):
        raise CorruptStoreError(
            f"corrupt trajectory shard {shard}: its SHA-256 differs from the manifest's "
            "(bytes changed on disk: a flipped bit or an overwrite)"
        )


def _footer(shard: Path) -> pq.FileMetaData:
    """The Parquet footer of a shard.

    Raises:
        CorruptStoreError: the file is not readable Parquet (names it).
    """
    try:
        return pq.ParquetFile(shard).metadata
    except (pa.ArrowException, OSError) as exc:
        raise CorruptStoreError(
            f"corrupt trajectory shard {shard}: not a readable Parquet file ({exc})"
        ) from None


def _read_shard(shard: Path) -> pa.Table:
    """One whole shard in the store's schema.

    Raises:
        CorruptStoreError: the file is not readable Parquet of this schema (names it).
    """
    try:
        return pq.read_table(shard, schema=SCHEMA)
    except (pa.ArrowException, OSError) as exc:
        raise CorruptStoreError(
            f"corrupt trajectory shard {shard}: not a readable Parquet file ({exc})"
        ) from None


class _locked:
    """``with _locked(folder):`` an exclusive ``flock`` on the folder itself (no lock file),
    serialising the manifest's read-modify-write across processes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.folder, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _tmp_pid(path: Path) -> int:
    """The writer pid in a temporary shard's name (``.NAME.PID.tmp``); 0 when there is none."""
    parts = path.name.split(".")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else 0


def _alive(pid: int) -> bool:
    """True when a process ``pid`` exists (0: unknown, counted as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable (best effort; not possible on every OS)."""
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


#: the store's folder inside a run directory
RUN_STORE_DIRNAME = "trajectories"


def open_run_store(run_dir: str | os.PathLike[str]) -> TrajectoryStore:
    """The read-only trajectory store of a run directory (``RUN_DIR/trajectories/``).

    Raises:
        RunDirError: ``run_dir`` has no trajectory store.
    """
    path = Path(run_dir) / RUN_STORE_DIRNAME
    if not path.is_dir():
        raise RunDirError(f"no trajectory store at {path} (is {run_dir} a run directory?)")
    return TrajectoryStore(path, read_only=True)
