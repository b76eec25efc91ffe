"""OpenEnv environments (``openenv-core`` 0.3.0, extra ``openenv``) as agentic-rl envs: ``openenv/<module>-v0``.

An OpenEnv env is a server: a package ``<module>`` laid out as ``openenv init`` writes one (and
as ``openenv-<name>`` distributions install one), whose ``<module>.server.app:app`` is the
FastAPI app of OpenEnv's ``create_app`` (routes ``/ws``, ``/reset``, ``/step``, ``/schema``,
``/health``). ``make("openenv/products_env-v0")`` builds an :class:`OpenEnvEnv` for the module
``products_env``; the module must be importable by the server's Python (installed, or on
``PYTHONPATH``). Nothing is fetched from a hub: OpenEnv's Docker and Hub launchers are not used.

Server
    Its own process: ``python -m uvicorn <module>.server.app:app`` on 127.0.0.1 with a free
    port, started on the first ``reset`` (lazily), health-waited (``GET /health``), stopped by
    ``close()`` and by a finalizer when the env is garbage collected (terminate, then kill its
    process group). One server per env instance, one WebSocket session on it: OpenEnv's HTTP
    ``/step`` builds a fresh env per request, so multi-turn episodes use the WebSocket.
Client
    OpenEnv's own ``GenericEnvClient`` (JSON dicts, no env-specific classes needed here), sync.
Observation
    The foreign observation is a dict of fields (``done``/``reward`` apart). The message is
    the one string field when there is exactly one (e.g. ``prompt``), else one ``key: value``
    line per field, sorted. The role is ``user``.
Action
    ``Action.text`` (the decoded sampled text, unchanged: no re-tokenization, no parsing) is
    put in the action's one string field, found in the server's ``/schema`` (or named with
    ``action_field``). Tool calls are not mapped (OpenEnv's MCP envs are not supported).
Reward
    ``step`` returns OpenEnv's reward of the step (None counts 0, kept as None in
    ``info["openenv_reward"]``). Rubric: outcome ``openenv_outcome`` = the final reward of an
    episode OpenEnv ended (``done``), mapped from ``reward_range`` to [0, 1] and clipped; 0
    when the episode was truncated. ``openenv_return`` (Σ of OpenEnv's rewards) is a weight-0
    metric; cost ``generated_tokens``.
Errors
    A foreign error is loud, never a silent 0: a server that does not start raises
    :class:`~agentic_rl.errors.EnvUnavailableError` (with its stderr), an error answered by the
    server on ``reset``/``step`` (the env raised, the action failed validation) raises
    :class:`OpenEnvError`, so the rollout engine marks the episode ``StopReason.ERROR`` and
    excludes it from training.
Horizon
    OpenEnv's ``done`` ends the episode (terminated); ``max_turns`` steps without it truncate.
Oracle
    OpenEnv defines none. :func:`register_openenv_oracle` adds a scripted policy for a module
    (a function of the foreign observation dict); without one ``oracle_reply`` is None, the
    ``train`` shortcut turns the warm-up and guidance off, and ``check-env``'s oracle check
    fails with that reason (it has no skip).
Snapshots
    Not supported: rollback replays from ``reset(seed)``.

Reference: OpenEnv ``openenv/core/env_server/http_server.py`` (routes, WebSocket sessions) and
``openenv/core/generic_client.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from collections.abc import Callable
from typing import Any

from agentic_rl.envs.base import Env, EpisodeEndedError, EpisodeNotStartedError
from agentic_rl.errors import AgenticRLError, EnvUnavailableError, UnknownEnvError
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.components import generated_tokens
from agentic_rl.types import Action, Message, Observation, Trajectory

__all__ = [
    "OPENENV_PATTERN",
    "OpenEnvEnv",
    "OpenEnvError",
    "OpenEnvServer",
    "register_openenv_oracle",
    "resolve_openenv_id",
]

OPENENV_PATTERN = "openenv/<module>-v0"
OPENENV_PREFIX = "openenv/"
_OPENENV_ID = re.compile(r"^openenv/([A-Za-z_][A-Za-z0-9_.]*)-v(\d+)$")
INSTALL = "pip install 'agentic-rl[openenv]'"
_OBS_SKIP = ("done", "reward", "metadata")

#: scripted policies by module: ``oracle(observation_dict) -> reply or None``
_ORACLES: dict[str, Callable[[dict[str, Any]], str | None]] = {}


class OpenEnvError(AgenticRLError, RuntimeError):
    """The OpenEnv server answered ``reset`` or ``step`` with an error (the message says which)."""


def register_openenv_oracle(module: str, oracle: Callable[[dict[str, Any]], str | None]) -> None:
    """Give the envs of ``module`` a scripted reference policy (warm-up demos, ``check-env``).

    ``oracle`` gets the foreign observation dict of the current state and returns the reply
    to send, or None when it has none. A second registration for a module replaces the first.
    """
    _ORACLES[module] = oracle


def _require_openenv() -> Any:
    try:
        return importlib.import_module("openenv.core.generic_client")
    except ImportError as exc:
        raise EnvUnavailableError(
            f"openenv/* envs need the 'openenv-core' package ({exc}); install it with {INSTALL}"
        ) from None


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

    def __init__(self, app: str, python: str | None = None, start_timeout_s: float = 90.0):
        self.app, self.python, self.start_timeout_s = app, python or sys.executable, start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._log: Any = None

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
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
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
        if self._log is not None:
            self._log.close()


def _shut(server: OpenEnvServer, client_box: list[Any]) -> None:
    """Close the client (if any) and stop the server; the finalizer and ``close`` call it."""
    for client in client_box:
        with contextlib.suppress(Exception):
            client.close()
    client_box.clear()
    server.stop()


def _action_field(schema: dict[str, Any]) -> str:
    """The one string field of an action JSON Schema (``metadata`` apart).

    Raises:
        UnknownEnvError: none or several (name one with ``action_field``).
    """
    props = schema.get("properties", {})
    names = [k for k, v in props.items() if k != "metadata" and v.get("type") == "string"]
    if len(names) != 1:
        raise UnknownEnvError(
            f"the env's action has {len(names)} string fields ({names}); name the one that "
            f"gets the reply with action_field=... (fields: {sorted(props)})"
        )
    return names[0]


def render_observation(observation: dict[str, Any]) -> str:
    """The text of a foreign observation dict (module docstring). Never raises."""
    fields = {k: v for k, v in observation.items() if k not in _OBS_SKIP}
    texts = [v for v in fields.values() if isinstance(v, str)]
    if len(texts) == 1:
        return texts[0]
    return "\n".join(f"{k}: {json.dumps(v, default=str)}" for k, v in sorted(fields.items()))


class OpenEnvEnv(Env):
    """An OpenEnv env served by its own local process (see the module docstring).

    Args:
        module: the OpenEnv env package (its ``server.app:app`` is served).
        max_turns: horizon in steps, >= 1.
        action_field: the action field that gets the reply; None finds the one string field.
        reward_range: ``(low, high)`` of the env's final reward, mapped to [0, 1]; low < high.
        python: the interpreter that runs the server (default: this one).

    Raises:
        ValueError: ``max_turns`` < 1 or an empty ``reward_range``.
        EnvUnavailableError: ``openenv-core`` is not installed (the message names the extra).
    """

    description = "An OpenEnv env served locally (extra 'openenv')"
    #: config keys the ``train --env`` shortcut sets before the user's ``--set``
    recipe_overrides: dict[str, Any] = {"rollout.max_new_tokens": 96}

    def __init__(
        self,
        module: str,
        max_turns: int = 5,
        action_field: str | None = None,
        reward_range: tuple[float, float] = (0.0, 1.0),
        python: str | None = None,
    ):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if not reward_range[0] < reward_range[1]:
            raise ValueError(
                f"reward_range must be (low, high) with low < high, got {reward_range}"
            )
        self._generic = _require_openenv()
        self.module, self.max_turns, self.action_field = module, int(max_turns), action_field
        self.reward_range = (float(reward_range[0]), float(reward_range[1]))
        self.server = OpenEnvServer(f"{module}.server.app:app", python)
        self._client: list[Any] = []  # the sync client, once the server runs
        self._finalizer = weakref.finalize(self, _shut, self.server, self._client)
        self._obs: dict[str, Any] | None = None
        self._done, self._turn = False, 0

    def _connect(self) -> Any:
        """The sync client of this env's server, starting the server on first use."""
        if not self._client:
            self.server.start()
            if self.action_field is None:
                self.action_field = _action_field(self.server.schema().get("action", {}))
            client = self._generic.GenericEnvClient(base_url=self.server.base_url).sync()
            self._client.append(client)
        return self._client[0]

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every foreign error is re-raised, named
            raise OpenEnvError(
                f"OpenEnv env {self.module!r}: {what} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """OpenEnv's ``reset(seed=...)`` on this env's session (the server starts if needed).

        Raises:
            EnvUnavailableError: the server did not start.
            OpenEnvError: the server answered with an error.
        """
        seed = self.episode_seed(seed)
        client = self._connect()
        result = self._call("reset", lambda: client.reset(seed=seed))
        self._obs, self._done, self._turn = dict(result.observation), False, 0
        info = {"openenv_module": self.module, "openenv_observation": _json_safe(self._obs)}
        return Observation(messages=(Message("user", render_observation(self._obs)),)), info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Send ``action.text`` in the action field (module docstring).

        Raises:
            EpisodeNotStartedError: before ``reset``.
            EpisodeEndedError: after the episode ended.
            OpenEnvError: the server answered with an error (the env raised, a bad action).
        """
        if self._obs is None:
            raise EpisodeNotStartedError("step() called before reset()")
        if self._done:
            raise EpisodeEndedError("step() called after the episode ended; call reset() first")
        client = self._client[0]
        result = self._call("step", lambda: client.step({self.action_field: action.text}))
        self._turn += 1
        self._obs = dict(result.observation)
        raw = result.reward
        reward, done = float(raw or 0.0), bool(result.done)
        truncated = not done and self._turn >= self.max_turns
        self._done = done or truncated
        info = {
            "openenv_reward": raw,
            "openenv_outcome": self.normalise(reward) if done else 0.0,
            "openenv_observation": _json_safe(self._obs),
        }
        text = render_observation(self._obs)
        messages = (Message("user", text),) if text and not self._done else ()
        return Observation(messages=messages), reward, done, truncated, info

    def normalise(self, reward: float) -> float:
        """``reward`` mapped from ``reward_range`` to [0, 1], clipped. Never raises."""
        low, high = self.reward_range
        return min(1.0, max(0.0, (reward - low) / (high - low)))

    def oracle_reply(self) -> str | None:
        """The registered oracle's reply to the current observation (None: none registered)."""
        oracle = _ORACLES.get(self.module)
        if oracle is None or self._obs is None or self._done:
            return None
        return oracle(self._obs)

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components in the module docstring)."""
        return Rubric(
            [
                RewardFunction("openenv_outcome", RewardGroup.OUTCOME, openenv_outcome),
                RewardFunction("openenv_return", RewardGroup.OUTCOME, openenv_return, weight=0.0),
                RewardFunction(
                    "generated_tokens", RewardGroup.COST, generated_tokens, weight=0.0005
                ),
            ],
            weights,
        )

    def close(self) -> None:
        """Close the client and stop the server (safe to call twice)."""
        self._finalizer()


def _json_safe(value: Any) -> Any:
    """``value`` as JSON values (unknown types as their ``str``); the trajectory store writes info."""
    return json.loads(json.dumps(value, default=str))


def openenv_outcome(trajectory: Trajectory) -> float:
    """OpenEnv's final reward normalised to [0, 1] (``info["openenv_outcome"]``); 0 without an end."""
    if trajectory.turns and trajectory.terminated:
        return float(trajectory.turns[-1].info.get("openenv_outcome", 0.0))
    return 0.0


def openenv_return(trajectory: Trajectory) -> float:
    """Σ of OpenEnv's per-step rewards (``Turn.reward``), a logged metric."""
    return float(sum(t.reward for t in trajectory.turns))


def openenv_modules() -> list[str]:
    """Modules with a registered oracle plus installed ``openenv-*`` distributions, sorted."""
    from importlib import metadata

    found = set(_ORACLES)
    for dist in metadata.distributions():
        name = str(dist.metadata["Name"] or "")
        if name.startswith("openenv-") and name != "openenv-core":
            found.add(name[len("openenv-") :].replace("-", "_"))
    return sorted(found)


def resolve_openenv_id(env_id: str) -> tuple[Callable[..., Env], str]:
    """``(factory, description)`` for an ``openenv/<module>-v0`` id; the factory takes the
    keywords of :class:`OpenEnvEnv` after ``module``.

    Raises:
        EnvUnavailableError: ``openenv-core`` is not installed (names the extra).
        UnknownEnvError: the id is not of the form ``openenv/<module>-v0``.
    """
    match = _OPENENV_ID.match(env_id)
    if match is None or match.group(2) != "0":
        raise UnknownEnvError(
            f"unknown env id {env_id!r}: ids of this family look like {OPENENV_PATTERN}, with "
            "an importable OpenEnv env package (its server.app:app is served)"
        )
    _require_openenv()
    module = match.group(1)

    def factory(max_turns: int = 5, **kwargs: Any) -> OpenEnvEnv:
        return OpenEnvEnv(module, max_turns=max_turns, **kwargs)

    overrides = dict(OpenEnvEnv.recipe_overrides)
    if module not in _ORACLES:  # no demonstrations and no guidance without an oracle
        overrides.update({"warmup.enabled": False, "sampling.guidance": "off"})
    factory.recipe_overrides = overrides  # type: ignore[attr-defined]
    return factory, f"OpenEnv env {module} (served locally)"


def register_openenv_family() -> None:
    """Register the ``openenv/<module>-v0`` family (lazy: imports nothing until an id is resolved).

    Raises:
        ValueError: the family is already registered.
    """
    from agentic_rl.envs.registry import EnvFamily, register_family

    register_family(
        EnvFamily(
            OPENENV_PATTERN,
            OPENENV_PREFIX,
            resolve_openenv_id,
            "OpenEnv envs, each served by its own local process (extra 'openenv')",
            openenv_modules,
        )
    )
