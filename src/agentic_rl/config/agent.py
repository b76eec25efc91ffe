"""``[agent]``: train an agent program through the policy server instead of an env's loop.

With ``function`` set (``agentic-rl train --agent module:function``) every RL rollout is one run
of the user's agent function ``agent(task, base_url)`` against the run's policy server
(:mod:`agentic_rl.agents`), G runs per task form a group, and held-out evaluation runs the agent
greedily on the held-out tasks (:mod:`agentic_rl.trainer.sampling.agent_rollouts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config import bounds
from agentic_rl.config.rules import check_rules, non_negative, positive

__all__ = ["AgentConfig"]


@dataclass(frozen=True)
class AgentConfig:
    """``[agent]``: the agent program an RL run trains (empty ``function``: an env run).

    Attributes:
        function: ``"package.module:function"`` or ``"path/to/file.py:function"``: the async
            (or plain) function ``agent(task, base_url)`` run once per rollout.
        tasks: where tasks come from: ``"env"`` (``env.reset`` of ``[env]``'s env on the RL
            task seeds, :func:`~agentic_rl.agents.tasks.env_task`), ``"list"`` (``task_list``)
            or a ``.jsonl``/``.json``/``.parquet`` file (step s takes the next
            ``tasks_per_step`` rows, cycling).
        task_list: the tasks of ``tasks = "list"`` (``[[agent.task_list]]`` tables).
        eval_tasks: held-out tasks for a file or list run (a file; empty: no held-out
            evaluation); ``tasks = "env"`` evaluates on the env's held-out seeds
            (``[eval] seed_start``, ``size``).
        reward: ``"module:function"`` ``reward(task, result) -> reward`` applied to what the
            agent returned (empty: the agent posts its reward or returns it).
        timeout_s: seconds from a rollout's start to its reward; past it the rollout is
            excluded from training (``Trajectory.failure``), counted and logged.
        max_concurrent: most agent runs at once (0: every rollout of a round).
        host: the address the policy server listens on. port: its port (0: a free one).
    """

    function: str = ""
    tasks: str = "env"
    task_list: list[dict[str, Any]] = field(default_factory=list)
    eval_tasks: str = ""
    reward: str = ""
    timeout_s: float = positive(300.0, bounds.MAX_TIMEOUT_S)
    max_concurrent: int = non_negative(0, bounds.MAX_BATCH)
    host: str = "127.0.0.1"
    port: int = non_negative(0, 65_535)

    def __post_init__(self) -> None:
        check_rules(self, "agent")
        for key in ("function", "reward"):
            value = getattr(self, key)
            if value and ":" not in value:
                raise ValueError(
                    f"key 'agent.{key}' must be 'module:function' or 'file.py:function', "
                    f"got {value!r}"
                )
        if not isinstance(self.task_list, list) or not all(
            isinstance(t, dict) for t in self.task_list
        ):
            raise ValueError("key 'agent.task_list' must be a list of tables")
        if self.tasks == "list" and not self.task_list:
            raise ValueError("agent.tasks = 'list' needs [[agent.task_list]] entries")
        if self.task_list and self.tasks != "list":
            raise ValueError(
                f"agent.task_list is set but agent.tasks = {self.tasks!r}: set agent.tasks = 'list'"
            )
        if self.tasks not in ("env", "list") and not self.tasks.endswith(
            (".jsonl", ".json", ".parquet")
        ):
            raise ValueError(
                "key 'agent.tasks' must be 'env', 'list' or a .jsonl/.json/.parquet file, "
                f"got {self.tasks!r}"
            )
