"""One live connection to an MCP server, driven from synchronous code: :class:`McpSession`.

The ``fastmcp`` client is asynchronous; envs step synchronously (and the rollout engine steps
several envs from threads). Each session therefore owns **one event loop in its own thread**:
a holder task enters ``async with Client(...)`` and waits for the stop signal, every request is
submitted to that loop with :func:`asyncio.run_coroutine_threadsafe` and awaited with a deadline
from the calling thread. Closing sets the stop signal (the client leaves its context: a stdio
server's stdin is closed, then the MCP SDK terminates and kills its process tree), stops the
loop and joins the thread; processes that survive that are killed by the session's marker
(an environment variable every process of the server inherits). Nothing outlives ``close``, nor
a killed trainer: a stdio server's processes, cgroup, workspace mount and directory are
registered with the trainer's child-server watchdog (:mod:`agentic_rl.processes`).
A stdio server runs under a ``sh`` that first joins the session's cgroup (where the host allows
one: :class:`~agentic_rl.tools.sandbox.limits.WholeLimits`, with the workspace tmpfs) and writes
the server's exit status to a file when it ends, so a server that dies before answering
``initialize`` fails the start at once, with its status and stderr. The server's stderr is a
pipe that a thread of the session drains, keeping the last ``limits.max_stderr_bytes`` (a server
that writes without end fills no disk and no memory).

Failures are exceptions whose class names are stable (the tool executor shows
``Error: <class>: <message>`` to the policy):

* :class:`McpToolError`: the server ran the tool and reported an error (``isError``);
* :class:`McpTimeoutError`: no answer within ``call_timeout_s``; a stdio server is then stopped;
* :class:`McpServerError`: the server could not start, or died, or broke the protocol; the
  session is closed and the message ends with the tail of the server's stderr.

Reference: Model Context Protocol specification 2025-06-18 (lifecycle: initialize, operation,
shutdown; ``tools/list`` and ``tools/call``), and fastmcp 4.1 ``fastmcp.Client``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from agentic_rl.tools.mcp.spec import McpServerSpec
from agentic_rl.tools.sandbox.bwrap import WORKER_PATH
from agentic_rl.tools.sandbox.limits import WholeLimits

__all__ = ["McpSession", "McpError", "McpServerError", "McpTimeoutError", "McpToolError"]

log = logging.getLogger(__name__)

MARKER_VARIABLE = "AGENTIC_RL_MCP_SESSION"
_CLOSE_TIMEOUT_S = 10.0
_GRACE_S = 5.0  # beyond a request's own timeout, before the caller stops waiting
_POLL_S = 0.2
#: sandboxed servers' uids (one per session; the python tool's: 200_000+) and gids (one per
#: server name, shared by its sessions, so its files in rw_paths stay theirs)
_UID_BASE, _UID_SPAN = 300_000, 100_000
#: ``sh -c`` script: join the cgroup (write its pid into each ``cgroup.procs`` named before
#: ``--``), run the server (``"$@"``), then write its exit status to the file ``$0``
_EXIT_WRAPPER = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; "$@"; echo $? > "$0"'
)


class McpError(RuntimeError):
    """Base class of the MCP failures a tool call turns into an error observation."""


class McpToolError(McpError):
    """The server ran the tool and answered with an error result (``isError: true``)."""


class McpTimeoutError(McpError):
    """The server did not answer a request within its timeout."""


class McpServerError(McpError):
    """The server could not start, exited, or broke the protocol."""


def _kill_marked(marker: str) -> int:
    """SIGKILL every process whose environment holds ``MARKER_VARIABLE=marker``; their count."""
    needle, killed = f"{MARKER_VARIABLE}={marker}".encode(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry.name), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError):
            continue
    return killed


class StderrTail:
    """A pipe for a server's stderr and a thread that drains it, keeping the last ``max_bytes``.

    Everything is read (a writer never blocks on a full pipe) and all but the tail dropped, so a
    server that writes without end costs the host neither disk nor memory.

    Attributes:
        file: the write end, as a file object to give the server as its stderr.
        total: bytes read so far.
    """

    def __init__(self, max_bytes: int) -> None:
        read_end, write_end = os.pipe()
        self.file = os.fdopen(write_end, "w")
        self.max_bytes, self.total = max_bytes, 0
        self._data = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._drain, args=(read_end,), name="mcp-stderr", daemon=True
        )
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, 1 << 16):
                with self._lock:
                    self.total += len(chunk)
                    self._data += chunk
                    if len(self._data) > self.max_bytes:
                        del self._data[: len(self._data) - self.max_bytes]
        except OSError:
            pass
        finally:
            os.close(fd)

    def text(self) -> str:
        """The kept tail, decoded (UTF-8, undecodable bytes replaced). Never raises."""
        with self._lock:
            return bytes(self._data).decode("utf-8", "replace")

    def close(self, timeout_s: float = 2.0) -> None:
        """Close the write end and wait up to ``timeout_s`` for the writers' end of file (the
        server's processes are gone by then). Never raises."""
        try:
            self.file.close()
        except OSError:
            pass
        self._thread.join(timeout_s)


def _text_of(result: Any) -> str:
    """The text of a ``CallToolResult``: text blocks joined, other blocks named, structured data
    as given when there is no text."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{kind} content, {getattr(block, 'mimeType', '?')}]")
    if not parts and result.structured_content is not None:
        parts.append(str(result.structured_content))
    return "\n".join(parts)


class McpSession:
    """A connection to one MCP server (see the module docstring).

    Args:
        spec: the server; a stdio server is started by :meth:`start`, in the sandbox when
            ``spec.sandbox == "bwrap"``.

    Attributes:
        workspace: the session's fresh host directory (the sandboxed server's ``/workspace``;
            the working directory of an unsandboxed one unless ``spec.cwd``); deleted on close.
        closed: whether :meth:`close` ran (a closed session answers nothing).
    """

    def __init__(self, spec: McpServerSpec):
        self.spec = spec
        self.marker = secrets.token_hex(8)
        self.tag = f"agentic-rl-mcp-{self.marker}"  # in its processes' command lines (the dir)
        self._dir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        self.workspace = self._dir / "workspace"
        self.workspace.mkdir()
        self.uid: int | None = None
        self.gid: int | None = None
        self.limits: WholeLimits | None = None
        self.stderr: StderrTail | None = None
        self._final_status: str | None = None
        self._exit_file = self._dir / "exit_status"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"mcp-{spec.name}", daemon=True
        )
        self._thread.start()
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._holder: concurrent.futures.Future[None] | None = None
        self.closed = False

    def _transport(self) -> Any:
        from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

        spec = self.spec
        if spec.transport == "http":
            return StreamableHttpTransport(spec.url, headers=dict(spec.headers) or None)
        env = {**dict(spec.env), MARKER_VARIABLE: self.marker}
        argv, cwd = self._server_argv(env)
        # the server runs under a ``sh`` that joins the cgroup and writes its exit status to a
        # file: the client does not notice a server that dies before answering ``initialize``
        procs = [str(f) for f in self.limits.cgroup.procs_files] if self.limits.cgroup else []
        wrapped = ["-c", _EXIT_WRAPPER, str(self._exit_file), *procs, "--", *argv]
        sh = shutil.which("sh") or "/bin/sh"
        assert self.stderr is not None
        return StdioTransport(
            sh, wrapped, env=env, cwd=cwd, keep_alive=False, log_file=self.stderr.file
        )

    def _server_argv(self, env: dict[str, str]) -> tuple[list[str], str | None]:
        """The server's argv (in bwrap, or behind the worker's launcher) and working dir."""
        from agentic_rl.tools.mcp.sandboxed import launcher_argv, sandboxed_server_command

        spec = self.spec
        if spec.sandbox == "bwrap":
            argv = sandboxed_server_command(
                spec, self.workspace, self._dir, env, self.uid, self.gid
            )
            return argv, None
        config = spec.sandbox_config()
        argv = launcher_argv(spec, config, None, worker=str(WORKER_PATH), cwd=None)
        return argv, spec.cwd or str(self.workspace)

    def _prepare_stdio(self) -> None:
        """Whole-sandbox limits (workspace tmpfs, cgroup, watchdog registration), the uid of a
        sandboxed server on a root host, and the stderr pipe.

        Raises:
            SandboxUnavailableError: whole limits are required and the host lacks one.
        """
        config = self.spec.sandbox_config()
        self.limits = WholeLimits(
            self._dir, self.workspace, self.tag, config, environ=f"{MARKER_VARIABLE}={self.marker}"
        )
        if self.spec.sandbox == "bwrap" and os.geteuid() == 0:
            self.uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
            self.gid = _UID_BASE + zlib.crc32(self.spec.name.encode()) % _UID_SPAN
            os.chown(self.workspace, self.uid, self.gid)
        self.stderr = StderrTail(self.spec.max_stderr_bytes)

    async def _hold(self, ready: concurrent.futures.Future[None]) -> None:
        from fastmcp import Client

        self._stop = asyncio.Event()
        try:
            client = Client(self._transport(), init_timeout=self.spec.startup_timeout_s)
            async with client:
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    def start(self) -> McpSession:
        """Start (stdio) or reach (HTTP) the server and complete the MCP initialization.

        Returns:
            self.

        Raises:
            McpServerError: the server did not start or answer ``initialize`` within
                ``startup_timeout_s`` (the session is closed).
            SandboxUnavailableError: ``sandbox = "bwrap"`` and bubblewrap cannot run here, or
                whole-sandbox limits are required (``limits.require_whole_limits``) and the
                host lacks one.
            ImportError: fastmcp is not installed (``pip install 'agentic-rl[mcp]'``).
        """
        # import before the clock starts (fastmcp takes seconds to import on a loaded machine)
        import fastmcp.client.transports  # noqa: F401
        import mcp.shared.exceptions  # noqa: F401

        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            if self.spec.transport == "stdio":
                self._prepare_stdio()
            self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready), self._loop)
            self._wait_ready(ready)
        except Exception as exc:
            from agentic_rl.tools.sandbox.bwrap import SandboxUnavailableError

            self.close()
            if isinstance(exc, SandboxUnavailableError):
                raise
            raise McpServerError(self._failure("could not start", exc)) from exc
        return self

    def _wait_ready(self, ready: concurrent.futures.Future[None]) -> None:
        """Wait for the initialization; fail at once when the stdio server exits first."""
        deadline = time.monotonic() + self.spec.startup_timeout_s + _GRACE_S
        while True:
            try:
                return ready.result(timeout=_POLL_S)
            except concurrent.futures.TimeoutError:
                if self._exit_file.exists():
                    raise McpServerError("exited before answering initialize") from None
                if time.monotonic() > deadline:
                    raise McpTimeoutError(
                        f"no answer within {self.spec.startup_timeout_s:g} s"
                    ) from None

    def _exit_status(self) -> str | None:
        if self._final_status is not None:
            return self._final_status
        try:
            return self._exit_file.read_text().strip() or None
        except OSError:
            return None

    def _failure(self, what: str, exc: BaseException | None) -> str:
        detail = f" ({type(exc).__name__}: {exc})" if exc is not None and str(exc) else ""
        if self._exit_status() is not None:
            detail += f" (exit status {self._exit_status()})"
        tail = self.stderr.text()[-500:].strip() if self.stderr is not None else ""
        stderr = f"; server stderr: {tail}" if tail else ""
        return f"MCP server '{self.spec.name}' {what}{detail}{stderr}"

    def _request(self, coro: Any, timeout: float) -> Any:
        if self.closed or self._client is None:
            coro.close()
            raise McpServerError(f"MCP server '{self.spec.name}' is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout=timeout + _GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpTimeoutError("no answer") from None

    def list_tools(self) -> list[Any]:
        """The server's tools (``tools/list``): ``mcp.types.Tool`` objects with ``name``,
        ``description``, ``inputSchema`` and ``annotations``.

        Raises:
            McpServerError: the server is not running or failed to answer.
        """
        try:
            return list(self._request(self._client_list_tools(), self.spec.startup_timeout_s))
        except Exception as exc:
            self.close()
            raise McpServerError(self._failure("failed to list its tools", exc)) from exc

    async def _client_list_tools(self) -> Any:
        return await self._client.list_tools()

    async def _client_call(self, name: str, arguments: dict[str, Any]) -> Any:
        timeout = self.spec.call_timeout_s
        return await self._client.call_tool(name, arguments, timeout=timeout, raise_on_error=False)

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call server tool ``name`` (``tools/call``) and return the text of its result.

        Raises:
            McpToolError: the tool reported an error (the server keeps running).
            McpTimeoutError: no answer within ``call_timeout_s``; a stdio server is stopped.
            McpServerError: the server is not running, died, or broke the protocol (the
                session is closed).
        """
        from mcp.shared.exceptions import MCPError

        timeout = self.spec.call_timeout_s
        try:
            result = self._request(self._client_call(name, dict(arguments)), timeout)
        except (McpTimeoutError, MCPError) as exc:
            if isinstance(exc, McpTimeoutError) or "timed out" in str(exc):
                stopped = self.spec.transport == "stdio"
                if stopped:
                    self.close()
                tail = "; the server was stopped (a fresh one starts on the next call)"
                raise McpTimeoutError(
                    f"MCP server '{self.spec.name}' did not answer '{name}' within {timeout:g} s"
                    + (tail if stopped else "")
                ) from None
            self.close()
            raise McpServerError(self._failure(f"failed during '{name}'", exc)) from exc
        except McpError:
            raise
        except Exception as exc:  # the connection broke: the server exited or garbled stdout
            self.close()
            raise McpServerError(self._failure(f"failed during '{name}'", exc)) from exc
        text = _text_of(result)
        if result.is_error:
            raise McpToolError(text or f"tool '{name}' failed")
        return text

    def close(self) -> None:
        """Stop the server (stdio) or disconnect (HTTP), stop the loop thread, delete the
        workspace. Idempotent; never raises."""
        if self.closed:
            return
        self.closed = True
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._holder is not None:
            try:
                self._holder.result(timeout=_CLOSE_TIMEOUT_S)
            except BaseException:  # noqa: BLE001 - a server that died already is what we want
                self._holder.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()
        if self.spec.transport == "stdio" and _kill_marked(self.marker):
            log.warning("MCP server '%s': killed processes that outlived the close", self.spec.name)
        self._final_status = self._exit_status()
        if self.stderr is not None:
            self.stderr.close()
        if self.limits is not None:  # cgroup, workspace mount, directory, watchdog registration
            self.limits.close()
        shutil.rmtree(self._dir, ignore_errors=True)
