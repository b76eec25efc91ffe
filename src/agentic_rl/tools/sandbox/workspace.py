"""Workspace file operations for the ``read_file``, ``write_file`` and ``list_dir`` tools.

They run on the host, confined to one episode's workspace directory:

- paths are relative to the workspace; absolute paths and ``..`` components are rejected;
- every path component is opened with ``O_NOFOLLOW`` relative to the previous directory's
  descriptor, so a symbolic link (even one the sandboxed code swaps in between the check and
  the use) is never followed: paths through symlinks are rejected;
- reads return at most ``max_chars`` characters (with a truncation marker), writes accept at
  most ``max_bytes`` bytes.

Errors are :class:`WorkspaceError` with a message meant for the policy.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from pathlib import Path

from agentic_rl.tools.definition.tool import ToolOutput

__all__ = ["WorkspaceError", "read_file", "read_file_output", "write_file", "list_dir"]

_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes that start no character

_MAX_ENTRIES = 500


class WorkspaceError(ValueError):
    """A file tool call was refused or failed; the message is shown to the policy."""


def _split(path: str) -> list[str]:
    if not isinstance(path, str) or "\x00" in path:
        raise WorkspaceError("path must be a string without NUL characters")
    if path.startswith("/") or path.startswith("~"):
        raise WorkspaceError(
            f"absolute path {path!r} rejected: use a path relative to the workspace"
        )
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise WorkspaceError(f"path {path!r} rejected: '..' may not leave the workspace")
    return parts


def _open_dir(root: Path, parts: list[str], *, create: bool, uid: int | None) -> int:
    """Descriptor of the directory ``root/parts`` walked without following symlinks."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if uid is not None:
                        os.chown(part, uid, uid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _explain(exc: OSError, path: str) -> WorkspaceError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return WorkspaceError(
            f"{path!r}: not a regular path inside the workspace (symbolic links are not followed)"
        )
    if exc.errno == errno.ENOENT:
        return WorkspaceError(f"{path!r}: no such file or directory")
    if exc.errno == errno.EISDIR:
        return WorkspaceError(f"{path!r}: is a directory")
    return WorkspaceError(f"{path!r}: {exc.strerror}")


def read_file(root: Path, path: str, *, max_chars: int) -> str:
    """Return the text of workspace file ``path`` (UTF-8, undecodable bytes replaced).

    Content beyond ``max_chars`` characters is cut, followed by ``…[truncated N bytes]``.

    Raises:
        WorkspaceError: the path is absolute, escapes with ``..``, goes through a symlink,
            does not exist, or is not a regular file.
    """
    return str(read_file_output(root, path, max_chars=max_chars))


def read_file_output(root: Path, path: str, *, max_chars: int) -> str | ToolOutput:
    """As :func:`read_file`; a cut file comes as a :class:`ToolOutput` with the size of the
    whole file (characters counted over the whole file, bytes from its size), so the ``read_file``
    tool's observation and audit record state the real size.

    Raises:
        WorkspaceError: as :func:`read_file`.
    """
    parts = _split(path)
    if not parts:
        raise WorkspaceError(f"{path!r}: is a directory")
    try:
        dfd = _open_dir(root, parts[:-1], create=False, uid=None)
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise WorkspaceError(f"{path!r}: not a regular file")
            size = os.fstat(f.fileno()).st_size
            data = f.read(4 * max_chars)
            rest_chars = 0  # characters after what was read: counted, not kept
            while chunk := f.read(1 << 20):
                rest_chars += len(chunk.translate(None, _CONTINUATION))
    except OSError as exc:
        raise _explain(exc, path) from None
    text = data.decode("utf-8", "replace")
    if len(text) > max_chars or size > len(data):
        kept = text[:max_chars]
        cut = f"{kept}…[truncated {size - len(kept.encode('utf-8', 'replace'))} bytes]"
        return ToolOutput(cut, len(text) + rest_chars, size)
    return text


def write_file(
    root: Path, path: str, content: str, *, max_bytes: int, uid: int | None = None
) -> str:
    """Write ``content`` to workspace file ``path`` (parents created) and say what was done.

    Files and directories are given to ``uid`` when set, so the sandboxed code can change them.

    Raises:
        WorkspaceError: the path is rejected (see :func:`read_file`), names a directory, or
            the content is larger than ``max_bytes`` bytes in UTF-8.
    """
    parts = _split(path)
    if not parts:
        raise WorkspaceError(f"{path!r}: is a directory")
    data = content.encode("utf-8")
    if len(data) > max_bytes:
        raise WorkspaceError(f"content is {len(data)} bytes; the limit is {max_bytes}")
    try:
        dfd = _open_dir(root, parts[:-1], create=True, uid=uid)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
            fd = os.open(parts[-1], flags, 0o644, dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "wb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise WorkspaceError(f"{path!r}: not a regular file")
            if uid is not None:
                os.fchown(f.fileno(), uid, uid)
            f.write(data)
    except OSError as exc:
        raise _explain(exc, path) from None
    return f"wrote {len(data)} bytes to {posixpath.join(*parts)}"


def list_dir(root: Path, path: str = ".") -> str:
    """List workspace directory ``path``: one line per entry, ``name/`` for directories,
    ``name -> (symlink)`` for links, ``name  N bytes`` for files; at most 500 entries.

    Raises:
        WorkspaceError: the path is rejected (see :func:`read_file`) or is not a directory.
    """
    parts = _split(path)
    try:
        dfd = _open_dir(root, parts, create=False, uid=None)
    except OSError as exc:
        raise _explain(exc, path) from None
    lines = []
    try:
        with os.scandir(dfd) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if len(lines) == _MAX_ENTRIES:
                    lines.append("…[more entries not shown]")
                    break
                if entry.is_symlink():
                    lines.append(f"{entry.name} -> (symlink)")
                elif entry.is_dir(follow_symlinks=False):
                    lines.append(f"{entry.name}/")
                else:
                    size = entry.stat(follow_symlinks=False).st_size
                    lines.append(f"{entry.name}  {size} bytes")
    finally:
        os.close(dfd)
    return "\n".join(lines) if lines else "(empty directory)"
