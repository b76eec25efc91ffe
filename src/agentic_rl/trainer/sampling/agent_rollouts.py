"""The ``proxy`` rollout source: RL rollouts are runs of the user's agent through the policy server.

With ``[agent] function`` set (``agentic-rl train --agent module:function``), :func:`start_agent`
starts a :class:`~agentic_rl.agents.server.PolicyServer` in front of the run's rollout sampler
(``run.state.backend.policy``: the local FastPolicy/HFPolicy, or the vLLM backend's client) and the
recipe takes each step's batch from :class:`AgentRollouts` instead of the env loop:

    task seeds (sequential or the task pool) -> tasks (env.reset, or rows of a dataset)
        -> G runs of agent(task, base_url) per task, each with its own rollout URL
        -> one trajectory per run, its reward the one the agent reported
        -> dynamic sampling with refill, credit assignment, the PPO update (unchanged)

Held-out evaluation (:func:`agent_eval`, called by the recipe's ``run_eval``) runs the agent once
per held-out task with greedy decoding and reads success from its reward (outcome >= 1, as for
envs). The warm-up is the recipe's: oracle demonstrations of ``[env]``'s env, which an agent
whose prompt renders like the env's (``tasks = "env"``, same instructions and tool schemas)
sees in the same chat format. Off-policy guidance needs the env's own episodes and is not
applied to agent rollouts. Not supported with agents: ``algorithm.max_off_policy_steps`` >= 1,
Ray generation workers, torchrun with more than one process (:func:`check_agent`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from agentic_rl.agents.recorder import Budget
from agentic_rl.agents.runner import AgentJob, AgentRunner, load_callable
from agentic_rl.agents.server import PolicyServer, RolloutSpec
from agentic_rl.agents.tasks import env_task, load_tasks, task_level
from agentic_rl.envs import make
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.evaluation.held_out import is_success, summarize
from agentic_rl.trainer.parallel.scale_out import launched_world_size
from agentic_rl.trainer.run import Run, replay_kwargs, store
from agentic_rl.trainer.sampling.rollouts import _task_seeds, groups_needed
from agentic_rl.trainer.sampling.task_pool import SampledBatch, sample_with_refill
from agentic_rl.types import RolloutSampling, Trajectory

__all__ = ["AgentRollouts", "AgentSession", "agent_eval", "check_agent", "start_agent"]

log = logging.getLogger(__name__)


def _task_file(spec: str) -> list[dict[str, Any]]:
    try:
        return load_tasks(Path(spec))
    except ValueError as exc:
        raise ConfigError(f"agent tasks: {exc}") from None


def check_agent(config: Any) -> None:
    """Check an ``[agent]`` section before any work (nothing when ``function`` is empty).

    Raises:
        ConfigError: the function or reward callback cannot be imported, a task file cannot be
            read, or a setting agents do not support (``max_off_policy_steps`` >= 1, generation
            workers, torchrun, an env mixture) is on.
    """
    agent = config.agent
    if not agent.function:
        return
    for key in ("function", "reward"):
        if getattr(agent, key):
            try:
                load_callable(getattr(agent, key), f"agent.{key}")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    for spec in (agent.tasks, agent.eval_tasks):
        if spec and spec not in ("env", "list"):
            _task_file(spec)
    unsupported = [
        ("algorithm.max_off_policy_steps >= 1", config.algorithm.max_off_policy_steps > 0),
        ("scale.num_generation_workers > 0", config.scale.num_generation_workers > 0),
        ("torchrun with more than one process", launched_world_size() > 1),
        ("an env mixture ([[env.mix]])", bool(getattr(config.env, "mix", None))),
    ]
    for what, on in unsupported:
        if on:
            raise ConfigError(f"agent.function is set: {what} is not supported with agents yet")


class AgentSession:
    """The policy server, the agent runner and the tasks of an agent run.

    Attributes:
        server, runner: see :mod:`agentic_rl.agents`. env_id: ``agent:<function>``, the
            trajectories' env id. train_tasks, eval_tasks: dataset tasks (None: from the env).
    """

    def __init__(self, run: Run):
        cfg = run.config
        agent = cfg.agent
        self.env_id = f"agent:{agent.function}"
        reward = load_callable(agent.reward, "agent.reward") if agent.reward else None
        self.train_tasks = (agent.task_list if agent.tasks == "list" else None) or (
            _task_file(agent.tasks) if agent.tasks not in ("env", "list") else None
        )
        self.eval_tasks = _task_file(agent.eval_tasks) if agent.eval_tasks else None
        self.server = PolicyServer(
            run.state.backend.policy,
            run.chat,
            Budget(cfg.rollout.max_new_tokens, cfg.rollout.max_total_tokens),
            model_name=cfg.name,
            temperature=cfg.rollout.temperature,
            weights=cfg.reward,
            host=agent.host,
            port=agent.port,
        ).start()
        self.runner = AgentRunner(
            self.server,
            load_callable(agent.function, "agent.function"),
            reward,
            timeout_s=agent.timeout_s,
            max_concurrent=agent.max_concurrent,
            weights=cfg.reward,
        )
        log.info("policy server for agent %s at %s", agent.function, self.server.origin)

    def tasks(self, run: Run, seeds: list[int], held_out: bool = False) -> list[dict[str, Any]]:
        """The tasks of ``seeds``: the env's reset, or dataset rows ``seed % len``."""
        rows = self.eval_tasks if held_out else self.train_tasks
        if rows is not None:
            return [rows[s % len(rows)] for s in seeds]
        env = make(run.config.env.id, **replay_kwargs(run))
        try:
            return [env_task(env, s, run.config.env.id) for s in seeds]
        finally:
            env.close()

    def run_round(
        self,
        run: Run,
        prefix: str,
        seeds: list[int],
        group_size: int,
        sample_seed: int | None,
        greedy: bool = False,
    ) -> list[Trajectory]:
        """``group_size`` agent runs of the task of each seed; their trajectories in order (the
        sampler's cache freed and the policy version stamped afterwards)."""
        rollout = run.config.rollout
        jobs = []
        for seed, task in zip(seeds, self.tasks(run, seeds, held_out=greedy)):
            info = dict(task.get("info") or {}) if "env_id" in task else {"task": task}
            level = task_level(task)
            if level is not None:
                info["level"] = level
            for _ in range(group_size):
                sampling = RolloutSampling(
                    sample_seed, len(jobs), rollout.temperature, greedy, rollout.max_new_tokens
                )
                spec = RolloutSpec(self.env_id, seed, f"{prefix}-{seed}", sampling, greedy, info)
                jobs.append(AgentJob(uuid.uuid4().hex, task, spec))
        started = time.perf_counter()
        trajectories = self.runner.run(jobs)
        seconds = (time.perf_counter() - started) / max(len(jobs), 1)
        trajectories = [
            dataclasses.replace(t, info={**t.info, "rollout_seconds": seconds})
            for t in trajectories
        ]
        return self.server.free_cache(lambda: run.state.backend.finish_round(trajectories))

    @staticmethod
    def metrics(batch: SampledBatch) -> dict[str, float]:
        """``rollout/agent_<kind>``: the step's rollouts excluded by kind (``timeout``,
        ``agent_error``, ``reward_error``, ``no_call``; :class:`~agentic_rl.agents.runner.AgentRunner`)."""
        out = {
            f"rollout/agent_{k}": 0.0 for k in ("timeout", "agent_error", "reward_error", "no_call")
        }
        for t in batch.all:
            kind = t.info.get("failure_kind")
            if kind in ("timeout", "agent_error", "reward_error", "no_call"):
                out[f"rollout/agent_{kind}"] += 1
        return out

    def close(self) -> None:
        """Stop the server and its policy thread; idempotent."""
        self.server.close()


def start_agent(run: Run) -> AgentSession | None:
    """The run's :class:`AgentSession` (server started), or None without ``[agent] function``."""
    return AgentSession(run) if run.config.agent.function else None


def _sample_seed(run: Run, step: int, round_index: int) -> int:
    """The same per-round sampling seed as the env rollouts' (``trainer.rollouts``)."""
    return run.config.seed * 1_000_003 + step + round_index * 1_000_000_007


class AgentRollouts:
    """The rollout source of an agent run (``rollout_source`` yields it): G agent runs per task,
    with dynamic sampling and the task pool as for env rollouts."""

    def __init__(self, run: Run):
        self.run = run
        self.session: AgentSession = run.state.agent

    def batch(self, step: int) -> SampledBatch:
        """The scored rollouts of RL step ``step``."""
        run = self.run
        alg, sampling = run.config.algorithm, run.config.sampling
        per_round = (
            (sampling.rollout_tasks or alg.tasks_per_step)
            if sampling.dynamic_sampling
            else alg.tasks_per_step
        )
        drawn: list[int] = []

        def one_round(r: int) -> list[Trajectory]:
            seeds = _task_seeds(run, step, r, per_round, drawn)
            drawn.extend(seeds)
            seed = _sample_seed(run, step, r)
            return self.session.run_round(run, f"rl-{step}", seeds, alg.group_size, seed)

        batch = sample_with_refill(
            one_round,
            groups_needed=max(groups_needed(run), 1),
            max_rounds=sampling.max_sample_rounds,
            dynamic=sampling.dynamic_sampling,
        )
        if run.task_pool is not None:
            run.task_pool.update(batch.all, is_success)
        return batch

    def close(self) -> None:
        """Nothing to stop (the session lives for the whole run)."""


def agent_eval(run: Run, tag: str, rl_step: int, progress: Any) -> dict[str, Any]:
    """Greedy held-out evaluation through the agent (one run per held-out task); logs, stores
    and returns the eval row as ``run_eval`` does ({} when the run has no held-out tasks)."""
    cfg = run.config
    session: AgentSession = run.state.agent
    if session.train_tasks is not None and session.eval_tasks is None:
        log.warning("agent run without agent.eval_tasks: no held-out evaluation (%s)", tag)
        return {}
    size = (
        cfg.eval.size if session.eval_tasks is None else min(cfg.eval.size, len(session.eval_tasks))
    )
    first = cfg.eval.seed_start if session.eval_tasks is None else 0
    progress("eval", 0, 1, f"evaluating ({tag}) on {size} held-out tasks through the agent")
    started = time.perf_counter()
    trajectories = session.run_round(run, "eval", list(range(first, first + size)), 1, None, True)
    metrics = summarize(trajectories, "eval")
    row = {"phase": "eval", "tag": tag, "rl_step": rl_step, "step": rl_step, **metrics}
    row["perf/eval_seconds"] = time.perf_counter() - started
    row["eval/agent_timeout"] = session.runner.counts.get("timeout", 0)
    run.metrics.write(row)
    store(
        run,
        trajectories,
        phase="eval",
        tag=tag,
        rl_step=rl_step,
        step=rl_step,
        policy_version=rl_step,
    )
    run.state.evals.append(row)
    progress("eval", 1, 1, f"{tag}: success {metrics['eval/success']:.0%}")
    return row
