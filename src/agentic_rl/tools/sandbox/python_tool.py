"""The stateful ``python`` tool: one long-lived interpreter per episode, inside the sandbox.

Like a notebook kernel, variables persist across calls of one episode. The host talks to the
worker's supervisor (:mod:`agentic_rl.tools.sandbox._sandbox_worker`) over two dedicated pipes (passed
into the sandbox with ``pass_fds``; the sandbox's stdin and stdout are ``/dev/null``) with one
JSON line per request and per reply. The code runs in a separate kernel process whose
descriptors 1 and 2 are pipes that the supervisor reads and caps, so nothing the program writes
anywhere can reach, forge or shift that protocol. Keeping the interpreter warm makes a trivial
call cost a pipe round trip instead of a process start (see ``benchmarks/python_tool_latency.py``).

A timeout, a crash, ``sys.exit(n)`` or ``os._exit(n)`` is a normal observation
(:class:`ExecResult` with flags and the exit status); the interpreter, and with it the whole
sandbox (every process it started), is killed and a fresh one starts on the next call, with
empty variables.
"""

from __future__ import annotations

import json
import os
import select
import signal as _signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl.tools.sandbox.bwrap import (
    WORKER_PATH,
    SandboxConfig,
    SandboxError,
    sandbox_command,
    warn_unsafe_local,
    worker_settings,
)
from agentic_rl.tools.sandbox.seccomp import filter_fd

__all__ = ["ExecResult", "PythonInterpreter", "ISOLATION_FLAGS"]

#: ``-I`` minus ``-E``: no user site-packages (``-s``), no script directory or cwd on
#: ``sys.path`` (``-P``). Environment variables are read, but the sandbox sets every one of them
#: (``--clearenv`` / an explicit env), among them ``PYTHONHASHSEED=0``: str/bytes hashes, and
#: with them set iteration order, are the same in every interpreter, so re-running an
#: episode's code gives the same output (snapshot restore and rollback rely on it).
ISOLATION_FLAGS = ("-s", "-P")


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one ``python`` call.

    Attributes:
        stdout: what the interpreter and every process it started wrote to descriptor 1
            (``print`` included) during the call, capped.
        stderr: the same for descriptor 2: the traceback of an uncaught exception, warnings,
            subprocesses' stderr; capped.
        value: ``repr`` of the final expression's value (None if there is none or it is None).
        exit_status: None while the interpreter lives on; otherwise its exit status (from
            ``sys.exit``/``os._exit``; ``128 + n`` when killed by signal ``n``, see ``signal``).
        timed_out: the call ran past the wall-clock limit and the sandbox was killed.
        memory_exceeded: a ``MemoryError`` was raised (the address-space limit was hit).
        output_truncated: some output was cut at ``max_output_chars``.
        dropped_chars: characters of output (stdout, stderr and value together) that the caps
            cut: the whole output is what is shown plus this many characters.
        dropped_bytes: the same in UTF-8 bytes.
        duration_s: wall-clock seconds of the call, as seen by the host.
        exception: type name of the uncaught exception, if any.
        signal: name of the signal that killed the interpreter (``"SIGSEGV"``, ``"SIGXCPU"``,
            ``"SIGKILL"``...), as seen by ``wait4``; None when it exited or lives on (a timeout
            is ``timed_out``, not a signal).
        cpu_exceeded: the interpreter was killed by ``RLIMIT_CPU`` (``SIGXCPU``, or ``SIGKILL``
            at the hard limit, after at least ``cpu_seconds`` of CPU time).
    """

    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    exit_status: int | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    output_truncated: bool = False
    duration_s: float = 0.0
    exception: str | None = None
    signal: str | None = None
    cpu_exceeded: bool = False
    dropped_chars: int = 0
    dropped_bytes: int = 0

    @property
    def ok(self) -> bool:
        """True when the code ran to the end without exception, timeout, signal or exit != 0."""
        return (
            not self.timed_out
            and self.exception is None
            and self.signal is None
            and self.exit_status in (None, 0)
        )

    @property
    def status(self) -> str:
        """``timeout``, ``killed`` (by ``signal``), ``exited`` (with ``exit_status``), ``error``
        (an uncaught exception) or ``ok``, in that order of precedence. Never raises."""
        if self.timed_out:
            return "timeout"
        if self.signal is not None:
            return "killed"
        if self.exit_status is not None:
            return "exited"
        return "ok" if self.exception is None else "error"

    def audit_fields(self) -> dict[str, Any]:
        """``{"status", "ok", "exit_code", "signal"}`` for the call's audit record (see
        :mod:`agentic_rl.tools.governance.audit`): ``exit_code`` only when it exited, ``signal`` only when
        killed by one. Never raises."""
        status = self.status
        return {
            "status": status,
            "ok": self.ok,
            "exit_code": self.exit_status if status == "exited" else None,
            "signal": self.signal,
        }

    def render(self) -> str:
        """The observation text shown to the policy (sections only when non-empty).

        Deterministic given the code's output: no timings, so that replaying an episode
        reproduces its observations (see :mod:`agentic_rl.rollout.rollback`)."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.value is not None:
            parts.append(f"Out: {self.value}")
        if self.output_truncated:
            more = f": {self.dropped_chars} more characters not shown" if self.dropped_chars else ""
            parts.append(f"[output truncated{more}]")
        if self.memory_exceeded:
            parts.append("[memory limit exceeded]")
        if self.cpu_exceeded:
            parts.append("[CPU time limit exceeded]")
        if self.timed_out:
            parts.append(
                "[timed out: the call ran past its time limit; the interpreter was "
                "restarted and its variables are lost]"
            )
        elif self.signal is not None:
            parts.append(
                f"[interpreter killed by signal {self.signal}; a fresh one starts on the next call]"
            )
        elif self.exit_status is not None:
            parts.append(
                f"[interpreter exited with status {self.exit_status}; a fresh one "
                "starts on the next call]"
            )
        return "\n".join(parts) if parts else "(no output)"


class PythonInterpreter:
    """A warm, sandboxed Python interpreter for one episode.

    Args:
        config: sandbox limits and backend.
        workspace: host directory mounted as the interpreter's working directory.
        uid: unprivileged user id to run as (bwrap backend with a root host), else None.
        marker: string put in the worker's command line so its processes can be found.
        capture: unused (kept for callers of the former capture-file protocol).

    The interpreter starts lazily on the first :meth:`execute`.
    """

    def __init__(
        self,
        config: SandboxConfig,
        workspace: Path,
        *,
        uid: int | None = None,
        marker: str = "agentic-rl-sandbox",
        capture: str | None = None,
    ) -> None:
        self.config, self.workspace, self.uid, self.marker = config, workspace, uid, marker
        self.capture = capture or "/tmp/.agentic_rl_fd_output"
        self._proc: subprocess.Popen[bytes] | None = None
        self._requests: int | None = None  # host ends of the protocol pipes
        self._replies: int | None = None
        self._buffer = b""

    @property
    def pid(self) -> int | None:
        """Host pid of the sandbox's top process (bwrap or the worker), None if not running."""
        return self._proc.pid if self._proc else None

    def _argv(self, protocol_fds: tuple[int, int], seccomp_fd: int | None = None) -> list[str]:
        settings = {
            **worker_settings(self.config, self.uid, self.capture),
            "protocol_fds": list(protocol_fds),
        }
        argv = [
            self.config.python,
            *ISOLATION_FLAGS,
            str(WORKER_PATH),
            json.dumps(settings),
            self.marker,
        ]
        if self.config.backend == "bwrap":
            return sandbox_command(self.config, self.workspace, argv, seccomp_fd)
        warn_unsafe_local()
        return argv

    def start(self) -> None:
        """Start the interpreter if it is not running.

        Raises:
            SandboxUnavailableError: the bwrap backend cannot run here.
            SandboxError: the interpreter did not report ready within ``startup_timeout_s``.
        """
        if self._proc is not None:
            return
        env = None
        if self.config.backend == "unsafe_local":
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(self.workspace),
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": "0",
            }
        self._buffer = b""
        (req_r, req_w), (rep_r, rep_w) = os.pipe(), os.pipe()
        seccomp_fd = filter_fd() if self.config.backend == "bwrap" else None  # no user namespaces
        extra = () if seccomp_fd is None else (seccomp_fd,)
        try:
            argv = self._argv((req_r, rep_w), seccomp_fd)
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(req_r, rep_w, *extra),
                cwd=str(self.workspace),
                env=env,
                start_new_session=True,
            )
        except BaseException:
            for fd in (req_w, rep_r):
                os.close(fd)
            raise
        finally:
            for fd in (req_r, rep_w, *extra):
                os.close(fd)
        self._requests, self._replies = req_w, rep_r
        line = self._read_line(time.monotonic() + self.config.startup_timeout_s)
        if line is None or not json.loads(line).get("ready"):
            err = self._kill_and_reap()[1]
            raise SandboxError(f"the sandboxed interpreter failed to start: {err.strip()}")

    def _read_line(self, deadline: float) -> bytes | None:
        """One protocol line, or None on EOF or deadline."""
        assert self._replies is not None
        limit = 16 * self.config.max_output_chars + (1 << 16)
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or len(self._buffer) > limit:
                return None
            ready, _, _ = select.select([self._replies], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _kill_and_reap(self) -> tuple[int | None, str]:
        """Kill the whole sandbox (process group and, for bwrap, its PID namespace)."""
        proc, self._proc = self._proc, None
        for fd in (self._requests, self._replies):
            if fd is not None:
                os.close(fd)
        self._requests = self._replies = None
        if proc is None:
            return None, ""
        try:
            os.killpg(proc.pid, _signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.kill()
        status = proc.wait()
        err = b""
        if proc.stderr is not None:
            ready, _, _ = select.select([proc.stderr], [], [], 0)
            err = os.read(proc.stderr.fileno(), 1 << 16) if ready else b""
            proc.stderr.close()
        return (128 - status if status < 0 else status), err.decode("utf-8", "replace")

    def execute(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """Run ``code`` in the episode's interpreter and return what happened.

        Never raises because of what the code does (timeouts, crashes and exits are flags on
        the result).

        Raises:
            SandboxUnavailableError: the bwrap backend cannot run here.
            SandboxError: the interpreter could not be (re)started.
        """
        start = time.monotonic()
        self.start()
        assert self._proc is not None and self._requests is not None
        limit = self.config.timeout_s if timeout_s is None else timeout_s
        _send(self._requests, json.dumps({"code": code}).encode() + b"\n", start + limit)
        line = self._read_line(start + limit)
        if line is None:
            try:  # EOF: let it finish exiting so that its own status is reported
                self._proc.wait(timeout=max(0.0, min(2.0, start + limit - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
            alive = self._proc.poll() is None
            status, _ = self._kill_and_reap()
            duration = time.monotonic() - start
            if alive and duration >= limit:
                return ExecResult(
                    timed_out=True,
                    duration_s=duration,
                    exit_status=status,
                    stderr=f"TimeoutError: the call ran longer than {limit} s\n",
                )
            return ExecResult(
                exit_status=status,
                duration_s=duration,
                stderr="the interpreter stopped without replying\n",
            )
        reply = json.loads(line)
        exit_status, signum = reply["exit"], reply["signal"]
        name = None
        if signum is not None:
            exit_status = 128 + signum
            try:
                name = _signal.Signals(signum).name
            except ValueError:
                name = f"signal {signum}"
        if exit_status is not None:
            self._kill_and_reap()
        return ExecResult(
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            value=reply["value"],
            exit_status=exit_status,
            memory_exceeded=reply["memory_exceeded"],
            output_truncated=reply["truncated"],
            exception=reply["exception"],
            duration_s=time.monotonic() - start,
            signal=name,
            cpu_exceeded=reply["cpu_exceeded"],
            dropped_chars=reply["dropped"][0],
            dropped_bytes=reply["dropped"][1],
        )

    def close(self) -> None:
        """Kill the interpreter and everything it started. Idempotent; never raises."""
        self._kill_and_reap()


def _send(fd: int, data: bytes, deadline: float) -> None:
    """Write ``data`` to the request pipe, giving up at ``deadline`` or when the sandbox is gone."""
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
            return
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue
        except OSError:  # EPIPE: the reader is gone; the reply read reports how it ended
            return
