"""The main environment's side of the verifiers bridge: one process per taskset, requests with ids
and deadlines, over a dedicated pair of pipes.

:mod:`agentic_rl.envs.adapters.verifiers` (the env) sends requests through a
:class:`VerifiersBridge`; :mod:`agentic_rl.envs.adapters.verifiers_bridge` answers them in the
verifiers virtualenv. What keeps the two in step:

Channel
    Requests and answers travel on two pipes made for them and passed to the bridge
    (``pass_fds``), never on its stdin/stdout: the bridge's descriptor 1 (``print``,
    ``os.write(1, …)``, any subprocess the taskset starts) goes to the same log as its stderr,
    and its stdin is ``/dev/null``. A taskset that writes to stdout cannot make a line look like
    an answer.
Ids
    Every request carries an ``id`` (a counter of the bridge); its answer must carry the same id
    and be the only line the bridge sent. Anything else (another id, a second line, a line that
    is not a JSON object, a line over :data:`MAX_ANSWER_BYTES`) is a desync.
Deadlines
    Each request has a deadline (``timeout_s``; loading the taskset :data:`LOAD_TIMEOUT_S`).
Recovery
    On expiry, desync or the bridge's exit, the bridge process (its whole process group: it is
    started in a session of its own) is killed, the request raises :class:`VerifiersError`
    naming what happened with the tail of the bridge's log, and the next request starts a
    fresh bridge (loading the taskset again). The env's episode fails with that error (the
    rollout engine marks it ``StopReason.ERROR``); the other envs of the taskset, which share
    the bridge and wait on its lock, go on with the fresh one: a request holds the lock at most
    until its deadline.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from agentic_rl.errors import AgenticRLError, EnvUnavailableError
from agentic_rl.venvs import venv_python

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "LOAD_TIMEOUT_S",
    "MAX_ANSWER_BYTES",
    "VerifiersBridge",
    "VerifiersError",
    "bridge_for",
    "close_bridges",
    "find_verifiers_python",
]

PYTHON_ENV_VAR = "AGENTIC_RL_VERIFIERS_PYTHON"
VENV_NAME = ".venv-verifiers"
INSTALL = "make install-verifiers"
BRIDGE = Path(__file__).with_name("verifiers_bridge.py")
#: seconds a ``task`` or ``score`` request may take by default (a taskset's judge may be slow)
DEFAULT_TIMEOUT_S = 120.0
#: seconds starting the bridge and loading the taskset may take (importing verifiers: ~10 s)
LOAD_TIMEOUT_S = 300.0
#: the longest answer line accepted (a task's prompt, rewards, metrics)
MAX_ANSWER_BYTES = 16 << 20
_READ = 1 << 16


class VerifiersError(AgenticRLError, RuntimeError):
    """verifiers answered a request with an error (a scoring function raised, a bad task), or
    the bridge failed: no answer before the deadline, a desynchronised or malformed answer, an
    exit (the message says which; the bridge restarts on the next request)."""


class _Fault(Exception):
    """The bridge broke the protocol or its deadline: it must be killed (internal)."""


def find_verifiers_python(python: str | os.PathLike | None = None) -> Path:
    """The Python of the verifiers virtualenv: ``python`` if given, else
    ``$AGENTIC_RL_VERIFIERS_PYTHON``, else ``.venv-verifiers/bin/python`` in the project root
    (:mod:`agentic_rl.venvs`; never the working directory or its parents).

    Raises:
        EnvUnavailableError: none exists (the message says how to build it).
    """
    path, why = venv_python(python, PYTHON_ENV_VAR, VENV_NAME)
    if path is not None:
        return path
    if python or os.environ.get(PYTHON_ENV_VAR):
        raise EnvUnavailableError(f"verifiers python not found: {why}")
    raise EnvUnavailableError(
        f"verifiers/* envs need verifiers in its own virtualenv ({why}); build it with "
        f"`{INSTALL}` in the project checkout, or set ${PYTHON_ENV_VAR} to its python"
    )


class _Process:
    """One bridge process: its pipes and its log (stdout and stderr)."""

    def __init__(self, python: Path) -> None:
        self.log = tempfile.TemporaryFile()
        req_r, self.requests = os.pipe()
        self.answers, rep_w = os.pipe()
        try:
            self.popen = subprocess.Popen(
                # -P: the script's folder (which holds verifiers.py) is not on sys.path
                [str(python), "-P", str(BRIDGE), str(req_r), str(rep_w)],
                stdin=subprocess.DEVNULL,
                stdout=self.log,  # descriptor 1 is a log, never the protocol
                stderr=self.log,
                pass_fds=(req_r, rep_w),
                start_new_session=True,  # its own process group, killed as one
            )
        except BaseException:
            for fd in (self.requests, self.answers):
                os.close(fd)
            self.log.close()
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        os.set_blocking(self.requests, False)

    def send(self, line: bytes, deadline: float) -> None:
        view = memoryview(line)
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.requests], [], left)[1]:
                raise _Fault("the request could not be sent before the deadline")
            try:
                view = view[os.write(self.requests, view) :]
            except BlockingIOError:
                continue
            except OSError as exc:
                raise _Fault(f"the bridge is gone ({exc}; exit code {self.popen.poll()})") from None

    def receive(self, deadline: float) -> bytes:
        """One whole answer line, or a fault (deadline, exit, a huge line, a second line)."""
        data = bytearray()
        chunk = b""
        while b"\n" not in chunk:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                raise _Fault("no answer before the deadline")
            chunk = os.read(self.answers, _READ)
            if not chunk:
                try:
                    raise _Fault(f"the bridge exited (exit code {self.popen.wait(timeout=5)})")
                except subprocess.TimeoutExpired:
                    raise _Fault("the bridge closed its answer pipe") from None
            data += chunk
            if len(data) > MAX_ANSWER_BYTES:
                raise _Fault(f"an answer line over {MAX_ANSWER_BYTES} bytes")
        line, _, rest = bytes(data).partition(b"\n")
        if rest or select.select([self.answers], [], [], 0)[0]:
            raise _Fault("more than one line came back for one request (out of step)")
        return line

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - 4 * chars))
            return self.log.read().decode("utf-8", "replace")[-chars:].strip()
        return ""

    def _close_pipes(self, *, answers: bool = True) -> None:
        """Close the request pipe (and the answer pipe), each once."""
        for name in ("requests", "answers") if answers else ("requests",):
            fd, _ = getattr(self, name), setattr(self, name, -1)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def stop(self, *, kill: bool = False) -> None:
        """End the process: close its request pipe (it exits at EOF), kill its process group
        after 10 s (at once with ``kill``, and in any case what it left running); close every
        file. Never raises."""
        if self.popen.poll() is None and not kill:
            self._close_pipes(answers=False)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)
        with contextlib.suppress(OSError):  # the group: subprocesses of the taskset too
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        self._close_pipes()
        with contextlib.suppress(OSError):
            self.log.close()


def _stop_holder(holder: list[_Process | None]) -> None:
    if holder[0] is not None:
        holder[0].stop()
        holder[0] = None


class VerifiersBridge:
    """The bridge of one taskset (module docstring); requests are serialised by a lock.

    Args:
        taskset: the verifiers taskset id.
        python: the verifiers virtualenv's Python (:func:`find_verifiers_python`).
        config: fields of the taskset's ``TasksetConfig`` (besides ``id``).

    Raises:
        EnvUnavailableError: the bridge did not start or the taskset did not load (the reason).
    """

    def __init__(self, taskset: str, python: Path, config: dict[str, Any] | None = None):
        self.taskset, self.python, self.config = taskset, python, dict(config or {})
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._holder: list[_Process | None] = [None]
        self._finalizer = weakref.finalize(self, _stop_holder, self._holder)
        self.restarts = 0  # bridges killed after a fault
        with self._lock:
            loaded = self._start()
        self.num_tasks: int | None = loaded["num_tasks"]
        self.reward_names: list[str] = list(loaded["rewards"])

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running bridge process (None after a fault, until the next request)."""
        return None if self._holder[0] is None else self._holder[0].popen

    def _start(self) -> dict[str, Any]:
        """Start the process and load the taskset (lock held). Raises EnvUnavailableError."""
        self._holder[0] = _Process(self.python)
        try:
            return self._exchange(
                {"op": "load", "taskset": self.taskset, "config": self.config}, LOAD_TIMEOUT_S
            )
        except VerifiersError as exc:
            _stop_holder(self._holder)
            raise EnvUnavailableError(
                f"verifiers taskset {self.taskset!r} did not load: {exc}"
            ) from None

    def request(
        self, message: dict[str, Any], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> dict[str, Any]:
        """Send one request (``{"op": …}``) and return its answer, within ``timeout_s`` seconds
        of getting the bridge (a fresh one after a fault: its start has its own deadline).

        Raises:
            VerifiersError: the answer is an error, or the bridge failed (no answer in time, out
                of step, malformed, exited: it is killed and restarts on the next request).
            EnvUnavailableError: a restarted bridge could not load the taskset.
        """
        with self._lock:
            if self._holder[0] is None or self._holder[0].popen.poll() is not None:
                _stop_holder(self._holder)
                self._start()
            return self._exchange(message, timeout_s)

    def _exchange(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        process = self._holder[0]
        assert process is not None
        rid = next(self._ids)
        op = message.get("op")
        try:
            process.send(json.dumps({**message, "id": rid}).encode() + b"\n", _deadline(timeout_s))
            answer = _parse(process.receive(_deadline(timeout_s)), rid)
        except _Fault as exc:
            tail = process.log_tail()
            process.stop(kill=True)
            self._holder[0] = None
            self.restarts += 1
            raise VerifiersError(
                f"the verifiers bridge for {self.taskset!r} failed on {op!r} (within "
                f"{timeout_s:g} s): {exc}; it was killed and restarts on the next request. "
                f"Its log: {tail or '(empty)'}"
            ) from None
        if not answer.get("ok"):
            raise VerifiersError(f"verifiers ({self.taskset}): {answer.get('error')}")
        return answer

    def stderr_tail(self, chars: int = 2000) -> str:
        """The last ``chars`` characters of the bridge's log (its stdout and stderr; "" once
        closed). Never raises."""
        process = self._holder[0]
        return "" if process is None else process.log_tail(chars)

    def close(self) -> None:
        """Stop the process (safe to call twice; a later request starts a new one)."""
        with self._lock:
            _stop_holder(self._holder)


def _deadline(timeout_s: float) -> float:
    return time.monotonic() + timeout_s


def _parse(line: bytes, rid: int) -> dict[str, Any]:
    """The answer of request ``rid``, or a fault (not a JSON object, another id)."""
    try:
        answer = json.loads(line)
    except ValueError as exc:
        raise _Fault(f"a malformed answer ({exc}): {line[:200]!r}") from None
    if not isinstance(answer, dict):
        raise _Fault(f"an answer that is not a JSON object: {line[:200]!r}")
    if answer.get("id") != rid:
        raise _Fault(f"the answer has id {answer.get('id')!r}, not {rid} (out of step)")
    return answer


_BRIDGES: dict[tuple[str, str], VerifiersBridge] = {}
_BRIDGES_LOCK = threading.Lock()


def bridge_for(taskset: str, python: str | os.PathLike | None = None) -> VerifiersBridge:
    """The shared bridge of ``taskset`` for that Python, started on first use.

    Raises:
        EnvUnavailableError: see :class:`VerifiersBridge`.
    """
    path = find_verifiers_python(python)
    key = (str(path), taskset)
    with _BRIDGES_LOCK:
        bridge = _BRIDGES.get(key)
        if bridge is None:
            bridge = _BRIDGES[key] = VerifiersBridge(taskset, path)
        return bridge


@atexit.register
def close_bridges() -> None:
    """Stop every shared bridge process (also run at interpreter exit). Never raises."""
    with _BRIDGES_LOCK:
        bridges = list(_BRIDGES.values())
        _BRIDGES.clear()
    for bridge in bridges:
        bridge.close()
