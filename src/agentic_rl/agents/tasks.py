"""Where an agent run's tasks come from: a list, a JSONL/JSON/Parquet dataset, or an env's reset.

A task is a JSON object handed to the agent as it is. Tasks from an env (``agent.tasks =
"env"``) are made by :func:`env_task` from ``env.reset(seed)``::

    {"seed": 17, "env_id": "calculator-v0",
     "prompt": "Multiply 69 by 64.",                 # the last user message
     "system": "You are a helpful assistant. …",     # the instructions, without the tool list
     "messages": [{"role": "system", …}, {"role": "user", …}],
     "tools": [{"type": "function", "function": {"name": "calculator", …}}],
     "info": {"level": "direct", "expected": 4416, …}}   # the reset info (JSON values)

so an agent that sends ``messages`` and ``tools`` as they are is shown exactly the prompt the
env's own rollouts show (the server lists the tools in the system prompt the same way), and one
with its own prompt can read ``prompt`` and grade itself with ``info``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentic_rl.tools.definition.prompt import split_tool_system_prompt

__all__ = ["env_task", "load_tasks", "task_level"]


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def env_task(env: Any, seed: int, env_id: str = "") -> dict[str, Any]:
    """The task of ``env.reset(seed=seed)`` (module docstring)."""
    observation, info = env.reset(seed=seed)
    tools = [dict(t) for t in observation.tools]
    messages = []
    for m in observation.messages:
        content = m.content
        if m.role == "system":
            split = split_tool_system_prompt(content, tools)
            content = split[0] if split is not None else content
        messages.append({"role": m.role, "content": content})
    users = [m["content"] for m in messages if m["role"] == "user"]
    systems = [m["content"] for m in messages if m["role"] == "system"]
    return {
        "seed": int(seed),
        "env_id": env_id or getattr(env, "env_id", "") or "",
        "prompt": users[-1] if users else "",
        "system": systems[0] if systems else "",
        "messages": messages,
        "tools": [{"type": "function", "function": t} for t in tools],
        "info": _json_safe(info),
    }


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    """The tasks of a ``.jsonl`` (one object a line), ``.json`` (a list of objects) or
    ``.parquet`` file (one object a row), in order.

    Raises:
        ValueError: the file is missing, unreadable, of another kind, empty, or holds a row
            that is not an object (the message names the file and the row).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"task file not found: {path}")
    try:
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        elif path.suffix == ".json":
            rows = json.loads(path.read_text())
        elif path.suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = _json_safe(pq.read_table(path).to_pylist())
        else:
            raise ValueError("expected a .jsonl, .json or .parquet file")
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read tasks from {path}: {exc}") from None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: no tasks (expected a non-empty list of objects)")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: task {i} is not an object: {row!r:.80}")
    return rows


def task_level(task: dict[str, Any]) -> str | None:
    """The task's difficulty level (``level``, or ``info.level``), for per-level metrics."""
    level = task.get("level", (task.get("info") or {}).get("level"))
    return None if level is None else str(level)
