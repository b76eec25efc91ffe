"""Snapshots of a sandboxed episode: a copy of its workspace files and the log that rebuilds its interpreter.

An :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox` can be snapshotted and restored (used by
environments' ``snapshot()``/``restore()`` and by :mod:`agentic_rl.rollout.rollback`). The
mechanism, and what it does and does not bring back:

* **Files**: :class:`WorkspaceImage` is an in-memory copy of the workspace tree (regular files
  with their bytes and permission bits, directories, symbolic links as links, never followed).
  Restoring replaces the whole workspace with it, so the files are exactly as they were.
  The host copies as root, so the copy cannot be turned against it: while it runs, every
  process of the sandbox is stopped (:mod:`agentic_rl.tools.sandbox.freeze`; one that will not stop is
  killed), and every path component is opened relative to its parent's descriptor with
  ``O_NOFOLLOW`` (modes and owners set through descriptors), so nothing outside the workspace
  is ever read, created or changed.
* **Interpreter state** (variables, imports, open objects) cannot be copied out of a process.
  It is rebuilt by *replay*: the sandbox records, for the interpreter now running (an
  "interpreter life", which starts at its first call and ends when a timeout, crash or exit
  kills it), the workspace image at its start and every state-changing call since (``python``
  code and ``write_file``), with the python results. Restoring kills the interpreter, puts
  back that start image, starts a fresh interpreter, re-runs the calls in order, checks that
  every python call gives the recorded result and that the files end as in the snapshot, and
  finally installs the snapshot's files. Code is deterministic across interpreters for
  everything the sandbox controls (same code, same files, ``PYTHONHASHSEED=0``); code that
  reads the clock, ``random`` without a seed, ``os.urandom`` or object addresses may not be.
  A divergence raises :class:`SnapshotReplayError` (default) or is logged (``strict=False``).
* **Not restored**: anything outside the workspace and the interpreter: background processes
  the code started (they are killed on restore and not restarted unless a replayed call starts
  them again), the private ``/tmp`` beyond what replayed calls write again, and any effect
  outside the sandbox (there should be none: no network, read-only system). Non-regular files
  in the workspace (FIFOs, sockets, devices) are not copied.

Snapshots are immutable values: one snapshot can be restored any number of times, into the same
sandbox or another one with the same configuration.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "WorkspaceImage",
    "RecordedCall",
    "SandboxSnapshot",
    "SnapshotError",
    "SnapshotReplayError",
]

DEFAULT_MAX_SNAPSHOT_BYTES = 64 << 20


class SnapshotError(RuntimeError):
    """A snapshot cannot be taken (workspace too large) or restored (wrong kind, closed sandbox)."""


class SnapshotReplayError(SnapshotError):
    """Replaying a snapshot's calls did not reproduce the recorded results (non-deterministic code).

    After this error the sandbox holds the snapshot's files but an interpreter whose state may
    differ from the snapshot's; reset the episode or restore another snapshot.
    """


@dataclass(frozen=True)
class WorkspaceImage:
    """An in-memory copy of a workspace tree.

    Attributes:
        entries: ``(relative_path, kind, payload, mode)`` sorted by path; kind ``"dir"``
            (payload None), ``"file"`` (payload: the bytes) or ``"link"`` (payload: the link
            target as text); mode: permission bits.
        size: total bytes of the files' contents.
    """

    entries: tuple[tuple[str, str, bytes | str | None, int], ...]
    size: int

    @classmethod
    def capture(cls, root: Path, max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES) -> WorkspaceImage:
        """Copy the tree under ``root`` into memory without following symbolic links.

        Every path component is opened relative to its parent directory's descriptor with
        ``O_NOFOLLOW``, so a link swapped in while it runs is never followed: the copy never
        reads outside ``root``. FIFOs, sockets and device files are skipped (reading a FIFO
        could block forever); an entry that vanishes while it runs is skipped.

        Raises:
            SnapshotError: the files hold more than ``max_bytes`` bytes, or the directories nest
                deeper than ``MAX_DEPTH``.
            OSError: ``root`` cannot be read.
        """
        entries: list[tuple[str, str, bytes | str | None, int]] = []
        fd = os.open(root, _DIR_FLAGS)
        try:
            total = _capture_dir(fd, "", entries, max_bytes, 0, 0)
        finally:
            os.close(fd)
        return cls(tuple(sorted(entries, key=lambda e: e[0])), total)

    def materialize(self, root: Path, uid: int | None = None) -> None:
        """Make ``root`` hold exactly this image: its current content is deleted first.

        Files and directories are given to ``uid`` when set (the sandbox user). Never follows a
        symbolic link: every component is opened relative to its parent's descriptor with
        ``O_NOFOLLOW``, modes and owners are set through descriptors, links are recreated as
        links, so nothing outside ``root`` is created or changed. Set-user-ID and set-group-ID
        bits are not restored.

        Raises:
            OSError: the workspace cannot be written (or changed under the call).
            SnapshotError: an entry's path is not a plain relative path.
        """
        tree: dict[str, list[tuple[str, str, bytes | str | None, int]]] = {}
        for path, kind, payload, mode in self.entries:
            parent, _, name = path.rpartition("/")
            if name in ("", ".", "..") or any(
                p in ("", ".", "..") for p in parent.split("/") if parent
            ):
                raise SnapshotError(f"snapshot entry {path!r} is not a plain relative path")
            tree.setdefault(parent, []).append((path, kind, payload, mode))
        fd = os.open(root, _DIR_FLAGS)
        try:
            for name in os.listdir(fd):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(name, dir_fd=fd)  # the descriptor-based, symlink-safe walk
                else:
                    os.unlink(name, dir_fd=fd)
            _materialize_dir(fd, "", tree, uid)
        finally:
            os.close(fd)


#: deepest directory nesting a snapshot copies (each level holds one descriptor while it is walked)
MAX_DEPTH = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_MODE_BITS = 0o1777  # permission bits and sticky; never set-user-ID or set-group-ID


def _capture_dir(fd: int, rel: str, entries: list, max_bytes: int, total: int, depth: int) -> int:
    """Append the entries under directory descriptor ``fd`` (at ``rel``); return the byte total."""
    if depth > MAX_DEPTH:
        raise SnapshotError(
            f"the workspace nests directories deeper than {MAX_DEPTH} levels; too deep to snapshot"
        )
    for name in sorted(os.listdir(fd)):
        path = f"{rel}/{name}" if rel else name
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                entries.append(
                    (path, "link", os.readlink(name, dir_fd=fd), stat.S_IMODE(st.st_mode))
                )
            elif stat.S_ISDIR(st.st_mode):
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                try:
                    entries.append((path, "dir", None, stat.S_IMODE(os.fstat(child).st_mode)))
                    total = _capture_dir(child, path, entries, max_bytes, total, depth + 1)
                finally:
                    os.close(child)
            elif stat.S_ISREG(st.st_mode):
                child = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                with os.fdopen(child, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    data = f.read(max_bytes - total + 1)
                total += len(data)
                if total > max_bytes:
                    raise SnapshotError(
                        f"the workspace holds more than {max_bytes} bytes; too large to snapshot"
                    )
                entries.append((path, "file", data, stat.S_IMODE(st.st_mode)))
        except OSError as exc:  # vanished, or swapped for a link or a file meanwhile: skipped
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise
    return total


def _materialize_dir(fd: int, rel: str, tree: dict, uid: int | None) -> None:
    """Create the image's entries under ``rel`` inside directory descriptor ``fd``."""
    for path, kind, payload, mode in tree.get(rel, ()):
        name = path.rpartition("/")[2]
        if kind == "dir":
            os.mkdir(name, 0o700, dir_fd=fd)
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                if uid is not None:
                    os.fchown(child, uid, uid)
                _materialize_dir(child, path, tree, uid)
                os.fchmod(child, mode & _MODE_BITS)  # last, once its children exist
            finally:
                os.close(child)
        elif kind == "link":
            os.symlink(str(payload), name, dir_fd=fd)
            if uid is not None:
                os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
        else:
            child = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd
            )
            with os.fdopen(child, "wb") as f:
                f.write(payload)  # type: ignore[arg-type]
                if uid is not None:
                    os.fchown(f.fileno(), uid, uid)
                os.fchmod(f.fileno(), mode & _MODE_BITS)


@dataclass(frozen=True)
class RecordedCall:
    """One state-changing call of an interpreter life, as recorded for replay.

    Attributes:
        tool: ``"python"`` or ``"write_file"``.
        arguments: the call's arguments (``{"code"}`` or ``{"path", "content"}``).
        outcome: for python, the deterministic fields of the result (stdout, stderr, value,
            exception, exit status, flags; no timing); for write_file, its reply text.
    """

    tool: str
    arguments: dict[str, Any]
    outcome: tuple[Any, ...]


@dataclass(frozen=True)
class SandboxSnapshot:
    """The state of an :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox` at one moment.

    Attributes:
        files: the workspace at that moment.
        life_start: the workspace when the running interpreter started (None: no interpreter
            was running; the next call starts a fresh one).
        calls: the state-changing calls of the running interpreter's life, in order.
    """

    files: WorkspaceImage
    life_start: WorkspaceImage | None
    calls: tuple[RecordedCall, ...]
