"""The per-value checks of the env contract.

Each ``*_problems`` function inspects one value an env returned and lists what is wrong with it
(an empty list when it is well-formed); it never raises. The env base imports this module
(through :mod:`agentic_rl.envs.spaces`), so it imports no env:
:func:`~agentic_rl.envs.oracle_success.play_oracle` (one episode with the env's own oracle, no
tokenizer) lives beside the oracle-success test. :mod:`agentic_rl.envs.checker` runs them all
over an env (``check_env``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import Any

from agentic_rl.rewards import RewardGroup, RewardWeights, Rubric
from agentic_rl.types import (
    MemoryEvent,
    Message,
    Observation,
    RiskEvent,
    ToolResult,
    Trajectory,
)

__all__ = [
    "ROLES",
    "observation_problems",
    "rubric_problems",
    "step_problems",
    "tool_schema_problems",
]

ROLES = ("system", "user", "assistant", "tool")


def _json_ok(value: Any) -> str | None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def observation_problems(obs: Any, where: str, *, first: bool = False) -> list[str]:
    """Problems of one observation (empty list when it is well-formed). Never raises."""
    if not isinstance(obs, Observation):
        return [f"{where}: observation is {type(obs).__name__}, not Observation"]
    problems = []
    if not isinstance(obs.messages, tuple):
        problems.append(f"{where}: messages is {type(obs.messages).__name__}, not tuple")
    for i, m in enumerate(obs.messages if isinstance(obs.messages, Iterable) else ()):
        if not isinstance(m, Message):
            problems.append(f"{where}: message {i} is {type(m).__name__}, not Message")
        elif m.role not in ROLES:
            problems.append(
                f"{where}: message {i} has role {m.role!r} (expected one of {', '.join(ROLES)})"
            )
        elif not isinstance(m.content, str):
            problems.append(f"{where}: message {i} content is {type(m.content).__name__}, not str")
    problems += _typed_step_problems(obs, where)
    if first and not problems:
        if not obs.messages:
            problems.append(f"{where}: the first observation has no messages")
        error = _json_ok([{"role": m.role, "content": m.content} for m in obs.messages])
        if error:
            problems.append(f"{where}: messages do not render to JSON chat messages: {error}")
    return problems


_TYPED = (
    ("tool_results", ToolResult),
    ("risk_events", RiskEvent),
    ("memory_events", MemoryEvent),
)


def _typed_step_problems(obs: Observation, where: str) -> list[str]:
    """Problems of the observation's typed step data (tuples of their types, a finite process
    reward or None, a bool context reset)."""
    problems = []
    for name, cls in _TYPED:
        value = getattr(obs, name)
        if not isinstance(value, tuple) or not all(isinstance(v, cls) for v in value):
            problems.append(f"{where}: {name} must be a tuple of {cls.__name__}, got {value!r}")
    reward = obs.process_reward
    if reward is not None and (
        isinstance(reward, bool)
        or not isinstance(reward, (int, float))
        or not math.isfinite(reward)
    ):
        problems.append(f"{where}: process_reward must be None or a finite float, got {reward!r}")
    if not isinstance(obs.context_reset, bool):
        problems.append(f"{where}: context_reset must be a bool, got {obs.context_reset!r}")
    return problems


def tool_schema_problems(tools: Any) -> list[str]:
    """Problems of an observation's tool schemas (empty when valid). Never raises."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if not isinstance(tools, (tuple, list)):
        return [f"tools is {type(tools).__name__}, not a tuple of dicts"]
    problems, names = [], []
    for i, schema in enumerate(tools):
        if not isinstance(schema, dict):
            problems.append(f"tool {i} is {type(schema).__name__}, not a dict")
            continue
        name = schema.get("name")
        if not isinstance(name, str) or not name:
            problems.append(f"tool {i} has no string 'name'")
        names.append(name)
        if not isinstance(schema.get("description"), str):
            problems.append(f"tool {name!r} has no string 'description'")
        params = schema.get("parameters")
        if not isinstance(params, dict):
            problems.append(f"tool {name!r}: 'parameters' is missing or not an object")
            continue
        try:
            Draft202012Validator.check_schema(params)
        except SchemaError as exc:
            problems.append(f"tool {name!r}: parameters are not a valid JSON Schema: {exc.message}")
            continue
        if params.get("type") != "object":
            problems.append(f'tool {name!r}: parameters must have "type": "object"')
    duplicates = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    if duplicates:
        problems.append(f"duplicate tool names: {', '.join(duplicates)}")
    return problems


def step_problems(result: Any, where: str) -> list[str]:
    """Problems of one ``step`` return value (empty when well-formed). Never raises."""
    if not isinstance(result, tuple) or len(result) != 5:
        return [f"{where}: step returned {type(result).__name__}, not a 5-tuple"]
    obs, reward, terminated, truncated, info = result
    problems = observation_problems(obs, where)
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        problems.append(f"{where}: reward is {type(reward).__name__}, not float")
    elif not math.isfinite(reward):
        problems.append(f"{where}: reward {reward} is not finite")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool):
            problems.append(f"{where}: {name} is {type(flag).__name__}, not bool")
    if not isinstance(info, dict):
        problems.append(f"{where}: info is {type(info).__name__}, not dict")
    else:
        error = _json_ok(info)
        if error:
            problems.append(f"{where}: info is not JSON-serialisable: {error}")
    return problems


def rubric_problems(rubric: Any, trajectory: Trajectory, weights: RewardWeights) -> list[str]:
    """Check the rubric's score object on one trajectory (see the module docstring). Never raises."""
    if not isinstance(rubric, Rubric):
        return [f"rubric() returned {type(rubric).__name__}, not Rubric"]
    try:
        total, comps = rubric.score(trajectory)
    except Exception as exc:  # noqa: BLE001
        return [f"seed {trajectory.seed}: rubric.score raised {type(exc).__name__}: {exc}"]
    problems = []
    if not math.isfinite(total):
        problems.append(f"seed {trajectory.seed}: total reward {total} is not finite")
    expected_total = 0.0
    for group in RewardGroup:
        members = [f for f in rubric.functions if f.group == group]
        missing = [f.name for f in members if f.name not in comps]
        if missing or group.value not in comps:
            problems.append(f"seed {trajectory.seed}: components miss {missing or [group.value]}")
            continue
        group_sum = sum(f.weight * comps[f.name] for f in members)
        if not math.isclose(comps[group.value], group_sum, rel_tol=1e-9, abs_tol=1e-9):
            problems.append(
                f"seed {trajectory.seed}: group {group.value!r} is {comps[group.value]} but its "
                f"weighted components sum to {group_sum}"
            )
        expected_total += group.sign * weights.of(group) * group_sum
    if not problems and not math.isclose(total, expected_total, rel_tol=1e-9, abs_tol=1e-9):
        problems.append(
            f"seed {trajectory.seed}: total {total} != Σ sign·λ·group = {expected_total} "
            f"(weights {dataclasses.asdict(weights)})"
        )
    return problems
