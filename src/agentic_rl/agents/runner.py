"""Run a user's agent function on tasks, each run tied to one recorded rollout of the server.

The agent is any Python function ``agent(task, base_url)`` (``async def`` or plain ``def``,
named as ``"module:function"`` or ``"path/to/file.py:function"``, :func:`load_callable`) that
points its OpenAI-compatible client at ``base_url`` and solves ``task`` (a dict). It never
imports agentic-rl. Its reward comes, in this order of precedence, from:

1. a reward posted to ``/rollouts/<id>/reward`` (any language, any process);
2. the ``reward`` callback ``reward(task, result)`` (``agent.reward``) on what the agent returned;
3. the agent's own return value (a number or a reward object,
   :mod:`agentic_rl.agents.reward`).

:meth:`AgentRunner.run` starts every rollout of a round at once (``max_concurrent`` of them at a
time when set) on an asyncio loop in the calling thread; plain functions run in threads. A
rollout whose reward has not arrived ``timeout_s`` after it started times out: it is closed (its
later calls get 404), excluded from training with ``Trajectory.failure`` saying why, counted in
:attr:`AgentRunner.counts` and logged; so is an agent that raises, a reward that cannot be read,
and a rollout that made no call. Never a silent 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl.agents.reward import ReportedReward, RewardFormatError, parse_reward
from agentic_rl.agents.server import PolicyServer, RolloutSpec
from agentic_rl.rewards.rubric import RewardWeights
from agentic_rl.types import Trajectory

__all__ = ["AgentJob", "AgentRunner", "load_callable"]

log = logging.getLogger(__name__)


def load_callable(spec: str, what: str = "agent") -> Callable[..., Any]:
    """The function named by ``spec``: ``"package.module:function"`` (imported with the current
    directory on ``sys.path``) or ``"path/to/file.py:function"``.

    Raises:
        ValueError: ``spec`` has no ``:``, the module or file cannot be imported, or the name
            is missing or not callable (the message names ``what`` and ``spec``).
    """
    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"{what} {spec!r} must be 'module:function' or 'file.py:function'")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            loader = importlib.util.spec_from_file_location(f"_agent_{path.stem}", path)
            if loader is None or not path.is_file():
                raise ImportError(f"no file {module_name}")
            module = importlib.util.module_from_spec(loader)
            sys.modules[loader.name] = module
            loader.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's: named
        raise ValueError(
            f"{what} {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{what} {spec!r}: {module_name} has no function {name!r}")
    return fn


@dataclass(frozen=True)
class AgentJob:
    """One rollout to run: its id, the task handed to the agent, and its trajectory's spec."""

    rollout_id: str
    task: dict[str, Any]
    spec: RolloutSpec


class AgentRunner:
    """Runs agent rollouts against a :class:`~agentic_rl.agents.server.PolicyServer`.

    Args:
        server: the started server (its rollouts are opened and closed here).
        agent: ``agent(task, base_url)``, async or not.
        reward: ``reward(task, result)`` (async or not), or None.
        timeout_s: seconds from a rollout's start to its reward (> 0).
        max_concurrent: most rollouts running at once (0: every rollout of a round).
        weights: the ``[reward]`` weights returned rewards are combined with.

    Attributes:
        counts: failures of the latest round by kind (``timeout``, ``agent_error``,
            ``reward_error``, ``no_call``).
    """

    def __init__(
        self,
        server: PolicyServer,
        agent: Callable[..., Any],
        reward: Callable[..., Any] | None = None,
        *,
        timeout_s: float = 300.0,
        max_concurrent: int = 0,
        weights: RewardWeights = RewardWeights(),
    ):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.server, self.agent, self.reward = server, agent, reward
        self.timeout_s, self.max_concurrent, self.weights = timeout_s, max_concurrent, weights
        self.counts: Counter[str] = Counter()

    def run(self, jobs: Sequence[AgentJob]) -> list[Trajectory]:
        """Run every job (rollouts of a round together) and return their trajectories in order.

        Raises:
            ValueError: two jobs share a rollout id.
        """
        if len({j.rollout_id for j in jobs}) != len(jobs):
            raise ValueError("each job needs its own rollout id")
        self.counts = Counter()
        if not jobs:
            return []
        threads = ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="agent")
        try:
            return asyncio.run(self._round(jobs, threads))
        finally:  # a plain agent stuck past its timeout is not waited for
            threads.shutdown(wait=False, cancel_futures=True)

    async def _round(self, jobs: Sequence[AgentJob], threads: ThreadPoolExecutor):
        limit = asyncio.Semaphore(self.max_concurrent or len(jobs))
        return await asyncio.gather(*(self._one(job, limit, threads) for job in jobs))

    async def _call(self, fn: Callable[..., Any], threads, *args: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        result = await asyncio.get_running_loop().run_in_executor(threads, fn, *args)
        return await result if inspect.isawaitable(result) else result

    async def _one(self, job: AgentJob, limit: asyncio.Semaphore, threads) -> Trajectory:
        async with limit:
            posted = self.server.open_rollout(job.rollout_id, job.spec)
            started = time.monotonic()
            reward: ReportedReward | None = None
            failure = kind = None
            returned = False
            try:
                result = await asyncio.wait_for(
                    self._call(
                        self.agent, threads, job.task, self.server.rollout_url(job.rollout_id)
                    ),
                    self.timeout_s,
                )
                returned = True

                def left() -> float:
                    return max(self.timeout_s - (time.monotonic() - started), 0.001)

                if not posted.done() and self.reward is not None:
                    score = self._call(self.reward, threads, job.task, result)
                    result = await asyncio.wait_for(score, left())
                if not posted.done() and result is not None:
                    reward = parse_reward(result, self.weights)
                if reward is None:
                    reward = await asyncio.wait_for(asyncio.wrap_future(posted), left())
            except TimeoutError:
                kind = "timeout"
                failure = (
                    f"no reward within agent.timeout_s = {self.timeout_s:g} s "
                    f"({'the agent returned none and posted none' if returned else 'the agent did not return'})"
                )
            except RewardFormatError as exc:
                kind, failure = "reward_error", f"the reported reward is malformed: {exc}"
            except Exception as exc:  # noqa: BLE001 - the user's agent failed: its rollout only
                kind, failure = "agent_error", f"the agent raised {type(exc).__name__}: {exc}"
                log.debug("rollout %s: the agent raised", job.rollout_id, exc_info=True)
            trajectory = self.server.close_rollout(job.rollout_id, reward, failure, kind)
        if trajectory.failure and kind is None:
            kind = "no_call"
            trajectory = dataclasses.replace(
                trajectory, info={**trajectory.info, "failure_kind": kind}
            )
        if kind is not None:
            self.counts[kind] += 1
            log.warning("rollout %s excluded: %s", job.rollout_id, trajectory.failure)
        return trajectory
