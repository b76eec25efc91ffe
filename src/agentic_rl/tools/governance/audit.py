"""Audit log: one JSON line per tool call, allowed or not, durable per record.

A record (written by :class:`~agentic_rl.tools.governance.executor.ToolExecutor`) holds:

============== ==========================================================================
field          meaning
============== ==========================================================================
time           UTC time the record was written (ISO 8601)
run_id         the run (from the executor's context; "" if none)
trajectory_id  the episode
turn           0-based turn of the episode
call_id        id of the call (for a call the parser rejected, the id of its place in the message)
tool           tool name ("" when the parser could not read one)
arguments      the call's arguments (replaced by a preview string when over 16 KiB)
decision       ``allow``, ``deny``, or ``error`` (parser error or unknown tool: nothing ran)
rule           the permission rule that decided (e.g. ``tools.rm.mode``)
reason         why
risk           risk category of a denial, else null
duration_s     seconds the tool ran (0 when it did not run)
ok             whether the call succeeded (the sandbox's ``python``: ran to the end, no
               exception, no timeout, no signal, exit status 0 if it exited)
status         ``ok``, ``error``, ``denied``, ``parse_error``, ``unknown_tool``; for a tool
               with ``Tool.audit_status`` (the sandbox's ``python``) also ``timeout``,
               ``exited`` and ``killed``
exit_code      exit status when the status is ``exited`` (``sys.exit``, ``os._exit``), else null
signal         name of the signal that killed the interpreter when the status is ``killed``
               (``SIGSEGV``, ``SIGXCPU`` at ``RLIMIT_CPU``, ``SIGKILL``...), else null
output_bytes   UTF-8 size of the tool's full output (before truncation for the model; a tool
               that cut its own output, as the sandbox's ``python`` caps what a program
               prints, reports the size of the whole output: ``ToolOutput``)
output_sha256  hex SHA-256 of the output the tool returned
truncated      whether the model saw a truncated output (cut by the tool or for the model)
============== ==========================================================================

Durability: each record is encoded first, then written with one ``write`` on a file opened
with ``O_APPEND``, then ``fsync``-ed before :meth:`AuditLog.append` returns, so a crash (even
``SIGKILL``) loses no completed record and never leaves a half record before a complete one.
Several processes may append to the same file.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentic_rl.types import valid_text

__all__ = ["AuditLog", "AUDIT_FILENAME", "MAX_ARGUMENT_CHARS"]

AUDIT_FILENAME = "audit.jsonl"
MAX_ARGUMENT_CHARS = 16384


class AuditLog:
    """Append-only JSON-lines audit log at ``path`` (parent directories are created lazily).

    Args:
        path: the ``.jsonl`` file.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AuditLog({str(self.path)!r})"

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Write one record (``time`` is added if absent) and fsync it; returns the record written.

        Arguments larger than :data:`MAX_ARGUMENT_CHARS` once encoded are replaced by a string
        preview (``"<N chars> …"``), so one huge call cannot bloat the log. Lone surrogates in
        any string (text a tool or a hand-built call did not make valid) are written as U+FFFD
        (:func:`~agentic_rl.types.valid_text`), so such a record is still written.

        Raises:
            OSError: the file cannot be created or written (an audit failure is never silent).
            TypeError: the record is not JSON-serialisable.
        """
        record = {"time": datetime.now(UTC).isoformat(timespec="microseconds"), **record}
        if "arguments" in record:
            encoded = json.dumps(record["arguments"], ensure_ascii=False, default=str)
            if len(encoded) > MAX_ARGUMENT_CHARS:
                record["arguments"] = f"<{len(encoded)} chars> {encoded[:200]}…"
        line = (valid_text(json.dumps(record, ensure_ascii=False, default=str)) + "\n").encode(
            "utf-8"
        )
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(line)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
        return record

    def read(
        self, tool: str | None = None, decision: str | None = None, trajectory_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Return the records, in order, matching every filter given (None = any).

        A final line without its newline (a write cut by a crash) is skipped. A missing file
        reads as no records.

        Raises:
            ValueError: a complete line is not a JSON object (the message gives its number).
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        lines = text.split("\n")
        lines.pop()  # "" after the last newline, or a torn final record
        out = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path}:{number}: not a JSON record ({exc})") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{self.path}:{number}: not a JSON object")
            if tool is not None and record.get("tool") != tool:
                continue
            if decision is not None and record.get("decision") != decision:
                continue
            if trajectory_id is not None and record.get("trajectory_id") != trajectory_id:
                continue
            out.append(record)
        return out
