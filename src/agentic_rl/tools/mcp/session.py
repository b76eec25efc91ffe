"""One live connection to an MCP server, driven from synchronous code: :class:`McpSession`.

The ``fastmcp`` client is asynchronous; envs step synchronously (and the rollout engine steps
several envs from threads). Each session therefore owns **one event loop in its own thread**:
a holder task enters ``async with Client(...)`` and waits for the stop signal, every request is
submitted to that loop with :func:`asyncio.run_coroutine_threadsafe` and awaited with a deadline
from the calling thread. Closing sets the stop signal (the client leaves its context: a stdio
server's stdin is closed, then the MCP SDK terminates and kills its process tree), stops the
loop and joins the thread; processes that survive that are killed by the session's marker
(an environment variable every process of the server inherits). Nothing outlives ``close``.
A stdio server runs under a ``sh`` that writes its exit status to a file, so a server that dies
before answering ``initialize`` fails the start at once, with its status and stderr.

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
from pathlib import Path
from typing import Any

from agentic_rl.tools.mcp.spec import McpServerSpec

__all__ = ["McpSession", "McpError", "McpServerError", "McpTimeoutError", "McpToolError"]

log = logging.getLogger(__name__)

MARKER_VARIABLE = "AGENTIC_RL_MCP_SESSION"
_CLOSE_TIMEOUT_S = 10.0
_GRACE_S = 5.0  # beyond a request's own timeout, before the caller stops waiting
_POLL_S = 0.2
#: ``sh -c`` script: run the server (``"$@"``), then write its exit status to the file ``$0``
_EXIT_WRAPPER = '"$@"; echo $? > "$0"'


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
        self._dir = Path(tempfile.mkdtemp(prefix=f"agentic-rl-mcp-{spec.name}-"))
        self.workspace = self._dir / "workspace"
        self.workspace.mkdir()
        self._log = self._dir / "server.log"
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
        if spec.sandbox == "bwrap":
            from agentic_rl.tools.mcp.sandboxed import sandboxed_server_command

            command, args = sandboxed_server_command(spec, self.workspace, self._dir, env)
            cwd = None
        else:
            command, args, cwd = spec.command, list(spec.args), spec.cwd or str(self.workspace)
        # the server runs under a ``sh`` that writes its exit status to a file: the client does
        # not notice a server that dies before answering ``initialize``, this file does
        wrapped = ["-c", _EXIT_WRAPPER, str(self._exit_file), command, *args]
        sh = shutil.which("sh") or "/bin/sh"
        return StdioTransport(sh, wrapped, env=env, cwd=cwd, keep_alive=False, log_file=self._log)

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
            SandboxUnavailableError: ``sandbox = "bwrap"`` and bubblewrap cannot run here.
            ImportError: fastmcp is not installed (``pip install 'agentic-rl[mcp]'``).
        """
        # import before the clock starts (fastmcp takes seconds to import on a loaded machine)
        import fastmcp.client.transports  # noqa: F401
        import mcp.shared.exceptions  # noqa: F401

        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready), self._loop)
        try:
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

    def _failure(self, what: str, exc: BaseException | None) -> str:
        detail = f" ({type(exc).__name__}: {exc})" if exc is not None and str(exc) else ""
        try:
            detail += f" (exit status {self._exit_file.read_text().strip()})"
        except OSError:
            pass
        try:
            tail = self._log.read_text(errors="replace")[-500:].strip()
        except OSError:
            tail = ""
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
        shutil.rmtree(self._dir, ignore_errors=True)
