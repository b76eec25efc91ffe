"""The process of one OpenEnv server: :class:`OpenEnvServer` (used by :mod:`agentic_rl.envs.adapters.openenv`).

``python -m uvicorn <module>.server.app:app`` on 127.0.0.1 with a free port, in its own process
group, under the trainer's child-server watchdog (:func:`agentic_rl.processes.spawn_guarded`:
a SIGKILLed trainer leaves no server behind); :meth:`OpenEnvServer.start` waits for
``GET /health``; :meth:`OpenEnvServer.stop` terminates the group (kills it after 10 s). Imports
only the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from agentic_rl.errors import EnvUnavailableError
from agentic_rl.processes import Registration, spawn_guarded

__all__ = ["OpenEnvServer", "shut"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OpenEnvServer:
    """One OpenEnv server process on 127.0.0.1 (see the module docstring).

    Args:
        app: the ASGI app as uvicorn takes it, ``"<module>.server.app:app"``.
        python: the interpreter that runs it (default: this one).
        start_timeout_s: seconds to wait for ``/health`` before giving up.
    """

    def __init__(self, app: str, python: str | None = None, start_timeout_s: float = 300.0):
        self.app, self.python, self.start_timeout_s = app, python or sys.executable, start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._log: Any = None
        self._registration: Registration | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the running server."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the process and wait until ``/health`` answers 200.

        Raises:
            EnvUnavailableError: the process exited or did not answer within
                ``start_timeout_s`` (the message holds the tail of its stderr).
        """
        self.port = _free_port()
        self._log = tempfile.TemporaryFile()
        argv = [self.python, "-m", "uvicorn", self.app, "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "--log-level", "warning"]
        self.process, self._registration = spawn_guarded(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log
        )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            time.sleep(0.1)
        why = (
            "exited"
            if self.process.poll() is not None
            else f"not ready in {self.start_timeout_s} s"
        )
        tail = self.log_tail()
        self.stop()
        raise EnvUnavailableError(f"the OpenEnv server {self.app!r} {why}: {tail}")

    def log_tail(self, chars: int = 2000) -> str:
        """The last ``chars`` characters the process wrote to stdout/stderr ("" when none)."""
        if self._log is None or self._log.closed:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-chars:].strip()

    def schema(self) -> dict[str, Any]:
        """The server's ``/schema`` (action, observation and state JSON Schemas)."""
        with urllib.request.urlopen(f"{self.base_url}/schema", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        """Terminate the process group (kill after 10 s); safe to call twice, never raises."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self._registration is not None:
            self._registration.release()
            self._registration = None
        if self._log is not None:
            self._log.close()


def shut(server: OpenEnvServer, client_box: list[Any]) -> None:
    """Close the client (if any) and stop the server; the finalizer and ``close`` call it."""
    for client in client_box:
        with contextlib.suppress(Exception):
            client.close()
    client_box.clear()
    server.stop()
