"""Snapshots of a sandboxed episode: a copy of its workspace files and the log that rebuilds its interpreter.

An :class:`~agentic_rl.tools.episode.EpisodeSandbox` can be snapshotted and restored (used by
environments' ``snapshot()``/``restore()`` and by :mod:`agentic_rl.rollout.rollback`). The
mechanism, and what it does and does not bring back:

* **Files**: :class:`WorkspaceImage` is an in-memory copy of the workspace tree (regular files
  with their bytes and permission bits, directories, symbolic links as links, never followed).
  Restoring replaces the whole workspace with it, so the files are exactly as they were.
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

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["WorkspaceImage", "RecordedCall", "SandboxSnapshot", "SnapshotError", "SnapshotReplayError"]

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

        FIFOs, sockets and device files are skipped (reading a FIFO could block forever).

        Raises:
            SnapshotError: the files hold more than ``max_bytes`` bytes.
        """
        entries: list[tuple[str, str, bytes | str | None, int]] = []
        total = 0
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(root / rel if rel else root) as it:
                items = sorted(it, key=lambda e: e.name)
            for entry in items:
                path = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    entries.append((path, "link", os.readlink(entry.path), mode))
                elif stat.S_ISDIR(st.st_mode):
                    entries.append((path, "dir", None, mode))
                    stack.append(path)
                elif stat.S_ISREG(st.st_mode):
                    total += st.st_size
                    if total > max_bytes:
                        raise SnapshotError(f"the workspace holds more than {max_bytes} bytes; "
                                            "too large to snapshot")
                    entries.append((path, "file", _read_regular(entry.path), mode))
        return cls(tuple(sorted(entries, key=lambda e: e[0])), total)

    def materialize(self, root: Path, uid: int | None = None) -> None:
        """Make ``root`` hold exactly this image: its current content is deleted first.

        Files and directories are given to ``uid`` when set (the sandbox user). Never follows a
        symbolic link: links are recreated as links.

        Raises:
            OSError: the workspace cannot be written.
        """
        for entry in os.scandir(root):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        for path, kind, payload, mode in self.entries:  # sorted: parents come before children
            target = root / path
            if kind == "dir":
                os.mkdir(target, 0o700)  # its own mode is set last, once its children exist
            elif kind == "link":
                os.symlink(str(payload), target)
            else:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(payload)  # type: ignore[arg-type]
                    os.fchmod(f.fileno(), mode)
            if uid is not None:
                os.chown(target, uid, uid, follow_symlinks=False)
        for path, kind, _, mode in reversed(self.entries):
            if kind == "dir":
                os.chmod(root / path, mode)


def _read_regular(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read()


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
    """The state of an :class:`~agentic_rl.tools.episode.EpisodeSandbox` at one moment.

    Attributes:
        files: the workspace at that moment.
        life_start: the workspace when the running interpreter started (None: no interpreter
            was running; the next call starts a fresh one).
        calls: the state-changing calls of the running interpreter's life, in order.
    """

    files: WorkspaceImage
    life_start: WorkspaceImage | None
    calls: tuple[RecordedCall, ...]
