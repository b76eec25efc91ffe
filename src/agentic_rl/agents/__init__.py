"""Train agents users already have: an OpenAI-compatible policy server that records exact tokens.

An agent program (a tool loop on the ``openai`` client, or an agent framework) calls the
trainer's policy through ``/rollouts/<id>/v1/chat/completions``; every call of one rollout is
recorded token-in/token-out into one :class:`~agentic_rl.types.Trajectory`, and the agent's
reported reward scores it. Modules, in data-flow order:

- :mod:`~agentic_rl.agents.api`: the chat-completions wire format (requests, replies, errors);
- :mod:`~agentic_rl.agents.recorder`: the calls of a rollout -> one trajectory (segments);
- :mod:`~agentic_rl.agents.worker`: one thread owns the policy and batches every caller;
- :mod:`~agentic_rl.agents.server` (and ``app``): the FastAPI/uvicorn server;
- :mod:`~agentic_rl.agents.reward`: the reward an agent reports;
- :mod:`~agentic_rl.agents.runner`: runs ``agent(task, base_url)`` per rollout, with timeouts;
- :mod:`~agentic_rl.agents.tasks`: tasks from a list, a dataset or an env's reset.

The trainer's rollout source is :mod:`agentic_rl.trainer.sampling.agent_rollouts`; the guide is
``docs/agents.md``. FastAPI and uvicorn are the ``serve`` extra.
"""

from agentic_rl.agents.recorder import Budget, RolloutRecorder
from agentic_rl.agents.reward import ReportedReward, parse_reward
from agentic_rl.agents.runner import AgentJob, AgentRunner, load_callable
from agentic_rl.agents.server import PolicyServer, RolloutSpec
from agentic_rl.agents.tasks import env_task, load_tasks

__all__ = [
    "AgentJob",
    "AgentRunner",
    "Budget",
    "PolicyServer",
    "ReportedReward",
    "RolloutRecorder",
    "RolloutSpec",
    "env_task",
    "load_callable",
    "load_tasks",
    "parse_reward",
]
