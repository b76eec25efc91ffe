"""The verifiers side of the ``verifiers/<taskset>-v0`` adapter: a JSON-lines bridge run by the
verifiers virtualenv's Python (``.venv-verifiers/bin/python verifiers_bridge.py``).

verifiers 0.4.0 requires ``openai<3`` and ``mcp==2.0.0``, which the project's own environment
cannot hold (its test extra pins openai 3.57, its mcp extra fastmcp 4.1.6), so the adapter in
the main environment never imports verifiers: it runs this file, which imports only the
standard library and verifiers, in verifiers' own environment and exchanges one JSON object
per line with it, on two pipes the adapter made for that (``verifiers_bridge.py REQ_FD ANS_FD``):
never on stdin/stdout, so nothing the taskset writes to descriptor 1 (``print``, ``os.write``, a
subprocess) can pass for an answer. The adapter points descriptor 1 and 2 at a log and
descriptor 0 at ``/dev/null`` (:mod:`agentic_rl.envs.adapters.verifiers_client`).

Requests (every request has an ``"id"``, which its answer repeats; every answer has ``"ok"``;
``"ok": false`` answers carry ``"error"``):

``{"op": "load", "taskset": ID, "config": {...}}``
    Load the taskset (verifiers' ``load_taskset`` on its narrowed ``TasksetConfig``) and check
    it is single-turn: the plain ``SingleAgentEnv``, no toolsets. Answers ``num_tasks`` (None
    for an infinite taskset) and ``rewards`` (the names of its ``@reward`` functions).
``{"op": "task", "seed": N}``
    The task of seed N (index ``N mod num_tasks``; the N-th of an infinite one): ``messages``
    (system prompt, then the prompt), ``name`` and ``answer`` (the task data's ``answer`` field
    as a string, None without one).
``{"op": "score", "seed": N, "reply": TEXT}``
    A verifiers ``Trace`` of the task's prompt and TEXT as the one sampled assistant message,
    scored by the task's own ``score`` (its ``@reward``, ``@metric`` and judge functions):
    ``rewards`` (``{name: [score, weight]}``), ``metrics`` and ``reward`` (verifiers' total).

Reference: verifiers ``verifiers/v1/task.py`` (``Task.score``), ``verifiers/v1/trace.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import traceback
from typing import Any


class Bridge:
    """The loaded taskset and the requests on it (module docstring)."""

    def __init__(self) -> None:
        self.taskset: Any = None
        self.tasks: list[Any] | None = None

    def load(self, taskset: str, config: dict[str, Any]) -> dict[str, Any]:
        import verifiers.v1 as vf  # noqa: F401 - loads the package before its loaders
        from verifiers.v1.envs.single_agent import SingleAgentEnv
        from verifiers.v1.utils.loaders import environment_class, load_taskset, taskset_config_type

        cfg = taskset_config_type(taskset).model_validate({**config, "id": taskset})
        env_cls = environment_class(taskset, "")
        if env_cls is not SingleAgentEnv:
            raise ValueError(
                f"taskset {taskset!r} plays through its own env {env_cls.__name__} (a multi-turn "
                "or multi-agent run()): only single-turn tasksets are supported"
            )
        self.taskset = load_taskset(cfg)
        if type(self.taskset).toolsets(cfg):
            raise ValueError(f"taskset {taskset!r} declares toolsets: tools are not supported")
        self.tasks = list(self.taskset) if self.taskset.bounded else None
        if self.tasks is not None and not self.tasks:
            raise ValueError(f"taskset {taskset!r} has no tasks")
        rewards = [fn.__name__ for fn in self._task(0).hooks("reward")]
        return {"num_tasks": None if self.tasks is None else len(self.tasks), "rewards": rewards}

    def _task(self, seed: int) -> Any:
        if self.taskset is None:
            raise RuntimeError("no taskset loaded: send a 'load' request first")
        if self.tasks is not None:
            return self.tasks[seed % len(self.tasks)]
        return next(itertools.islice(iter(self.taskset), seed, None))

    def task(self, seed: int) -> dict[str, Any]:
        data = self._task(seed).data
        answer = getattr(data, "answer", None)
        return {
            "messages": _prompt_messages(data),
            "name": data.name or f"task-{data.idx}",
            "answer": None if answer is None else str(answer),
        }

    def score(self, seed: int, reply: str) -> dict[str, Any]:
        import verifiers.v1 as vf
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask
        from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

        task = self._task(seed)
        kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
        nodes = []
        for m in _prompt_messages(task.data):
            parent = len(nodes) - 1 if nodes else None
            nodes.append(MessageNode(parent=parent, message=kinds[m["role"]](content=m["content"])))
        reply_node = MessageNode(
            parent=len(nodes) - 1 if nodes else None,
            message=AssistantMessage(content=reply),
            sampled=True,
        )
        trace = Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=AgentInfo(config=vf.AgentConfig()),
            nodes=[*nodes, reply_node],
        )
        asyncio.run(task.score(trace))
        rewards = {k: None if r is None else [r.score, r.weight] for k, r in trace.rewards.items()}
        return {"rewards": rewards, "metrics": trace.metrics, "reward": trace.reward}


def _prompt_messages(data: Any) -> list[dict[str, str]]:
    """The task's system prompt and prompt as ``[{"role", "content"}]`` (text content only)."""
    from verifiers.v1.types import content_text

    out = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        out.append({"role": "user", "content": data.prompt})
    else:
        for m in data.prompt or []:
            out.append({"role": m.role, "content": content_text(m.content) or ""})
    return out


def serve(requests: Any, answers: Any) -> None:
    """Answer each request line of ``requests`` with one line (with the request's ``id``) on
    ``answers`` until EOF."""
    bridge = Bridge()
    for line in requests:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            op = req.get("op")
            if op == "load":
                out = bridge.load(req["taskset"], req.get("config") or {})
            elif op == "task":
                out = bridge.task(int(req["seed"]))
            elif op == "score":
                out = bridge.score(int(req["seed"]), str(req["reply"]))
            else:
                raise ValueError(f"unknown op {op!r}")
            answer = {"ok": True, **out}
        except Exception as exc:  # noqa: BLE001 - every error goes back to the adapter, named
            traceback.print_exc(file=sys.stderr)
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps({**answer, "id": rid}, default=str) + "\n")
        answers.flush()


if __name__ == "__main__":
    requests_fd, answers_fd = int(sys.argv[1]), int(sys.argv[2])
    sys.stdout = sys.stderr  # the protocol has its own pipes; print goes to the log
    with (
        os.fdopen(requests_fd, encoding="utf-8") as reqs,
        os.fdopen(answers_fd, "w", encoding="utf-8") as out,
    ):
        serve(reqs, out)
