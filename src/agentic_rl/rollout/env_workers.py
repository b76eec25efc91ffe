"""Environments (and their sandboxes) in Ray actors, behind the ordinary :class:`Env` interface.

Generation stays in the trainer process; each env instance lives in one of N env-worker actors
(:class:`EnvWorkerPool`), on this machine or anywhere in a Ray cluster. :class:`RemoteEnv` is a
proxy that implements :class:`~agentic_rl.envs.base.Env`: its ``reset``/``step`` are actor
calls, so the rollout engine runs unchanged::

    pool = EnvWorkerPool(num_workers=4, address="auto")   # or None: start a local Ray
    envs = [pool.make("calculator-v0") for _ in seeds]
    trajectories = run_episodes(policy, chat, envs, seeds, group_ids, config)
    for env in envs: env.close()

Failures: an exception inside the env, or a dead actor, or a call past ``timeout_s``, is raised
by the proxy's ``reset``/``step`` as :class:`EnvWorkerError`; the engine then marks that episode
``StopReason.ERROR`` (excluded from training), as it does for a local env that raises.

Concurrency. Through ``run_episodes`` it depends on the decode schedule. With a policy that has
a continuous decode stream (:class:`~agentic_rl.policy.fast.FastPolicy`, the recipe's default
sampler) the engine runs each finished turn's ``env.step`` on one of its ``env_workers`` threads
(default 4) while decoding goes on; a proxy waits in ``ray.get``, which releases the GIL, so steps
of episodes held by different workers run at the same time (an actor runs one call at a time:
at most min(threads, N) steps overlap; ``tests/rollout/test_env_workers.py`` checks it). Resets,
and every step of the turn-synchronous schedule (any other policy, e.g. ``ScriptedPolicy`` or
``HFPolicy``), go one after another: there the proxies give isolation (envs and sandboxes off the
trainer's process and machine), not overlap. :meth:`EnvWorkerPool.step_many` and
:meth:`EnvWorkerPool.reset_many` issue the calls of a whole batch at once and wait for all of
them (``benchmarks/ray_env_workers.py`` measures them against the engine).

``reset`` adds ``env_worker_pid`` and ``env_worker_host`` to the env's reset info (so each
trajectory's ``info`` says where its env ran).

Requires the optional extra ``ray`` (``pip install 'agentic-rl[ray]'``, Ray 2.60).
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.errors import AgenticRLError
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.rollout.ray_local import init_ray
from agentic_rl.types import Action, Observation


class EnvWorkerError(RuntimeError):
    """A remote env call failed: the env raised, the worker died, or the call timed out."""


def require_ray(feature: str = "env workers"):
    """The ``ray`` module.

    Raises:
        AgenticRLError: Ray is not installed (names ``feature`` and the extra to install).
    """
    try:
        import ray
    except ImportError:
        raise AgenticRLError(f"{feature} need Ray: pip install 'agentic-rl[ray]'") from None
    return ray


_ray = require_ray


class EnvWorker:
    """Body of one env-worker actor: holds env instances by handle and calls them.

    Instances are created with a registered env id (looked up in this worker's registry, so
    ids registered on import of :mod:`agentic_rl.envs` work) or a picklable factory.
    """

    def __init__(self) -> None:
        self.envs: dict[int, Env] = {}

    def create(self, handle: int, env: str | Callable[..., Env], kwargs: dict[str, Any]) -> str:
        """Build an env under ``handle``; returns its ``env_id``."""
        if isinstance(env, str):
            from agentic_rl.envs import make

            instance = make(env, **kwargs)
        else:
            instance = env(**kwargs)
        self.envs[handle] = instance
        return instance.env_id

    def reset(self, handle: int, seed: int | None, options: dict[str, Any] | None):
        """``env.reset`` of the instance ``handle``; its info gains ``env_worker_pid`` and
        ``env_worker_host`` (this actor's process id and host name)."""
        observation, info = self.envs[handle].reset(seed=seed, options=options)
        return observation, {
            **info,
            "env_worker_pid": os.getpid(),
            "env_worker_host": socket.gethostname(),
        }

    def step(self, handle: int, action: Action):
        """``env.step`` of the instance ``handle``."""
        return self.envs[handle].step(action)

    def oracle_reply(self, handle: int) -> str | None:
        """``env.oracle_reply`` of the instance ``handle``."""
        return self.envs[handle].oracle_reply()

    def rubric(self, handle: int, weights: RewardWeights) -> Rubric:
        """``env.rubric`` of the instance ``handle`` (shipped back by pickle)."""
        return self.envs[handle].rubric(weights)

    def close(self, handle: int) -> None:
        """Close and forget the instance ``handle`` (no-op if unknown)."""
        env = self.envs.pop(handle, None)
        if env is not None:
            env.close()

    def call(self, handle: int, method: str, *args: Any) -> Any:
        """Any other env method (e.g. ``snapshot``/``restore`` of envs that have them)."""
        return getattr(self.envs[handle], method)(*args)

    def num_envs(self) -> int:
        """How many env instances this worker holds."""
        return len(self.envs)


class RemoteEnv(Env):
    """An :class:`Env` whose instance lives in an env-worker actor (made by :meth:`EnvWorkerPool.make`).

    Attributes:
        worker_index: which worker of the pool holds the instance.
    """

    def __init__(self, pool: EnvWorkerPool, worker_index: int, handle: int, env_id: str):
        self.pool, self.worker_index, self.handle, self.env_id = pool, worker_index, handle, env_id
        self._actor = pool.actors[worker_index]
        self._closed = False

    def call_async(self, method: str, *args: Any):
        """Start ``method(handle, *args)`` on the worker; returns a Ray ObjectRef."""
        return getattr(self._actor, method).remote(self.handle, *args)

    def _call(self, method: str, *args: Any):
        return self.pool.get([self.call_async(method, *args)], what=f"{self.env_id} {method}")[0]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Remote ``reset``. Raises :class:`EnvWorkerError` on any remote failure."""
        return self._call("reset", seed, options)

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Remote ``step``. Raises :class:`EnvWorkerError` on any remote failure (including
        the env's own ``EpisodeEndedError``/``EpisodeNotStartedError``, named in the message)."""
        return self._call("step", action)

    def oracle_reply(self) -> str | None:
        """Remote ``oracle_reply``."""
        return self._call("oracle_reply")

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """The remote env's rubric, run locally (reward functions score trajectories in this process)."""
        return self._call("rubric", weights)

    def snapshot(self) -> Any:
        """Remote ``snapshot`` (the value is shipped back by pickle)."""
        return self._call("call", "snapshot")

    def restore(self, snapshot: Any) -> None:
        """Remote ``restore``."""
        self._call("call", "restore", snapshot)

    def close(self) -> None:
        """Close the remote instance. Safe to call twice; never raises (a dead worker is ignored)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.pool.get([self.call_async("close")], what="close")
        except EnvWorkerError:
            pass


class EnvWorkerPool:
    """N env-worker actors in a Ray cluster; hands out :class:`RemoteEnv` proxies round-robin.

    Args:
        num_workers: number of actors (>= 1).
        address: Ray cluster to join (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``); None
            starts a private local Ray on loopback with token authentication
            (:func:`agentic_rl.rollout.ray_local.init_ray`), or reuses the one this process is
            already connected to.
        cpus_per_worker: CPUs each actor reserves in the Ray scheduler (fractions allowed; an
            actor that cannot be placed waits, so keep num_workers × cpus within the cluster).
        timeout_s: wall-clock limit of one remote call (seconds); a call past it fails its episode.

    Raises:
        ValueError: ``num_workers`` < 1 or ``timeout_s`` <= 0.
        AgenticRLError: Ray is not installed.
    """

    def __init__(
        self,
        num_workers: int,
        *,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        timeout_s: float = 300.0,
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        ray = _ray()
        if not ray.is_initialized():
            init_ray(address)
        actor_cls = ray.remote(num_cpus=cpus_per_worker)(EnvWorker)
        self.actors = [actor_cls.remote() for _ in range(num_workers)]
        self.timeout_s = timeout_s
        self._handles = itertools.count()
        self._next = itertools.cycle(range(num_workers))

    @property
    def num_workers(self) -> int:
        """N, the number of actors."""
        return len(self.actors)

    def make(self, env: str | Callable[..., Env], **kwargs: Any) -> RemoteEnv:
        """Create an env instance on the next worker and return its proxy.

        Args:
            env: a registered env id, or a picklable factory returning an :class:`Env`.
            kwargs: constructor arguments.

        Raises:
            EnvWorkerError: the worker could not build it (unknown id, bad kwargs: message kept).
        """
        index, handle = next(self._next), next(self._handles)
        env_id = self.get(
            [self.actors[index].create.remote(handle, env, kwargs)], what=f"create {env}"
        )[0]
        return RemoteEnv(self, index, handle, env_id or (env if isinstance(env, str) else ""))

    def get(self, refs: Sequence[Any], *, what: str) -> list[Any]:
        """Wait for ``refs``; any failure becomes :class:`EnvWorkerError` naming ``what``."""
        ray = _ray()
        try:
            return ray.get(list(refs), timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise EnvWorkerError(f"{what}: no answer within {self.timeout_s:g} s") from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            raise EnvWorkerError(f"{what}: {type(cause).__name__}: {cause}") from None
        except ray.exceptions.RayError as exc:  # dead actor, lost object, ...
            raise EnvWorkerError(f"{what}: {type(exc).__name__}: {exc}") from None

    def reset_many(
        self,
        envs: Sequence[RemoteEnv],
        seeds: Sequence[int | None],
        options: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[Any]:
        """Reset all ``envs`` concurrently; returns each result, or the :class:`EnvWorkerError` it raised."""
        opts = options or [None] * len(envs)
        return self._gather(
            [e.call_async("reset", s, o) for e, s, o in zip(envs, seeds, opts)], "reset"
        )

    def step_many(self, envs: Sequence[RemoteEnv], actions: Sequence[Action]) -> list[Any]:
        """Step all ``envs`` concurrently (each with its action); returns each result, or the
        :class:`EnvWorkerError` it raised (one failed env never fails the others)."""
        return self._gather([e.call_async("step", a) for e, a in zip(envs, actions)], "step")

    def _gather(self, refs: list[Any], what: str) -> list[Any]:
        out = []
        for ref in refs:  # all calls are already in flight; wait in order
            try:
                out.append(self.get([ref], what=what)[0])
            except EnvWorkerError as exc:
                out.append(exc)
        return out

    def shutdown(self) -> None:
        """Kill the actors (their envs and sandboxes go with them). Ray itself stays up."""
        ray = _ray()
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
