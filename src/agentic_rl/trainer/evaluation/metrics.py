"""Evaluation metrics over scored trajectories: success, unbiased pass@k, returns, costs, risk.

``pass_at_k`` is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models
Trained on Code", eq. 1): with n samples of a task of which c succeed,

    pass@k = 1 − C(n − c, k) / C(n, k),

computed as the product 1 − Π_{i=n−c+1..n} (1 − k / i) for numerical stability, and averaged
over tasks. ``eval_report`` aggregates a list of trajectories (G samples per task share a
``group_id``) into one flat JSON-able dict; ``compare_reports`` subtracts two of them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from agentic_rl.rewards.risk import risk_events
from agentic_rl.trainer.evaluation.held_out import is_success
from agentic_rl.types import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``n`` samples, ``c`` of them correct (Chen et al. 2021).

    Raises:
        ValueError: not 0 <= c <= n, or not 1 <= k <= n.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def eval_report(
    trajectories: Sequence[Trajectory], *, k: int = 1, wall_seconds: float | None = None
) -> dict[str, Any]:
    """Aggregate scored trajectories into the evaluation report.

    Tasks are identified by ``group_id``; every task must have at least ``k`` samples.

    Returns:
        a dict with ``episodes``, ``tasks``, ``samples_per_task``, ``success`` (mean over
        episodes), ``pass@1`` and ``pass@k`` (unbiased, mean over tasks), ``return_mean``,
        ``reward_components`` (means), ``cost`` (``generated_tokens``, ``total_tokens``,
        ``tool_calls`` per episode, ``wall_seconds`` in all), ``risk_incidents`` (total risk
        events and episodes with at least one), ``turns_mean``, ``stop_reasons`` (counts),
        ``failed`` (episodes excluded by an infra or reward error).

    Raises:
        ValueError: no trajectories, or a task has fewer than ``k`` samples.
    """
    if not trajectories:
        raise ValueError("eval_report needs at least one trajectory")
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_task[t.group_id].append(t)
    short = [g for g, items in by_task.items() if len(items) < k]
    if short:
        raise ValueError(f"pass@{k} needs >= {k} samples per task; {len(short)} task(s) have fewer")
    scored = [t for t in trajectories if not t.failed]
    names = list(dict.fromkeys(n for t in scored for n in t.reward_components))
    events = [sum(1 for _ in risk_events(t)) for t in trajectories]
    n = len(trajectories)
    report: dict[str, Any] = {
        "episodes": n,
        "tasks": len(by_task),
        "samples_per_task": min(len(v) for v in by_task.values()),
        "success": sum(is_success(t) and not t.failed for t in trajectories) / n,
        "pass@1": _mean(
            [
                pass_at_k(len(v), sum(is_success(t) and not t.failed for t in v), 1)
                for v in by_task.values()
            ]
        ),
    }
    if k > 1:
        report[f"pass@{k}"] = _mean(
            [
                pass_at_k(len(v), sum(is_success(t) and not t.failed for t in v), k)
                for v in by_task.values()
            ]
        )
    report.update(
        {
            "return_mean": _mean([t.reward for t in scored]),
            "reward_components": {
                name: _mean([t.reward_components.get(name, 0.0) for t in scored]) for name in names
            },
            "cost": {
                "generated_tokens": sum(t.num_generated_tokens for t in trajectories) / n,
                "total_tokens": sum(len(t.token_ids) for t in trajectories) / n,
                "tool_calls": sum(len(t.tool_calls) for t in trajectories) / n,
                "wall_seconds": wall_seconds,
            },
            "risk_incidents": {"events": sum(events), "episodes": sum(e > 0 for e in events)},
            "turns_mean": sum(len(t.turns) for t in trajectories) / n,
            "stop_reasons": dict(Counter(t.stop_reason.value for t in trajectories)),
            "failed": n - len(scored),
        }
    )
    return report


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out


def compare_reports(
    a: dict[str, Any], b: dict[str, Any]
) -> list[tuple[str, Any, Any, float | None]]:
    """Rows ``(metric, value_a, value_b, b − a)`` over the union of both (flattened) reports.

    Nested dicts are flattened with ``/``; the difference is None unless both are numbers.
    """
    fa, fb = _flatten(a), _flatten(b)
    rows = []
    for key in dict.fromkeys([*fa, *fb]):
        va, vb = fa.get(key), fb.get(key)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (va, vb))
        rows.append((key, va, vb, (vb - va) if numeric else None))
    return rows
