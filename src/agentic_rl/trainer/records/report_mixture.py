"""The report sections of a mixture run (``[[env.mix]]``): held-out success per env side by side,
then for each env its own held-out evaluation (plot and table with 95 % Wilson intervals, per
level) and its rollout curves.

Inputs as :mod:`agentic_rl.trainer.records.report`: the eval rows' ``eval/<env id>/…`` keys, the RL
rows' ``rollout/<env id>/…`` and ``reward_norm/<env id>/std`` keys, and each env's held-out
successes and task counts from the trajectory store
(:func:`~agentic_rl.trainer.records.report_data.eval_counts`). A run without ``env.mix`` in its
``config.toml`` has no such sections.
"""

from __future__ import annotations

import html
from pathlib import Path

from agentic_rl.trainer.records.report import (
    NO_DATA,
    _eval_label,
    _eval_plot,
    _eval_table,
    _format,
    _line_panels,
    _success_cell,
    _table,
)
from agentic_rl.trainer.records.report_data import EvalCounts, Row, eval_counts, mixture_env_ids

__all__ = ["mixture_sections"]

#: an env's rollout curves, after ``rollout/<env id>/``
_ROLLOUT_KEYS = ("success", "reward_total", "turns", "tool_calls", "generated_tokens")


def _as_single(row: Row, prefix: str) -> Row:
    """An eval row seen as a single-env run's: ``eval/<env id>/x`` becomes ``eval/x``."""
    out = {k: row[k] for k in ("tag", "step", "rl_step", "phase") if k in row}
    out.update(
        {f"eval/{k.removeprefix(prefix)}": v for k, v in row.items() if k.startswith(prefix)}
    )
    return out


def _env_counts(counts: EvalCounts, prefix: str) -> EvalCounts:
    """The counts of one env, keyed as a single-env run's (``eval/success``, ``eval/success/<lv>``)."""
    return {
        tag: {f"eval/{k.removeprefix(prefix)}": v for k, v in cells.items() if k.startswith(prefix)}
        for tag, cells in counts.items()
    }


def _overview(envs: list[str], evals: list[Row], counts: EvalCounts) -> str:
    """One row per eval point: pooled success and each env's, with 95 % Wilson intervals."""
    if not evals:
        return NO_DATA
    header = ["tag", "step", "all envs [95 % CI]", *(f"{e} [95 % CI]" for e in envs)]
    body = [
        [
            html.escape(_eval_label(r, i)),
            _format(r.get("step")),
            _success_cell(r, "eval/success", counts),
            *(_success_cell(r, f"eval/{e}/success", counts) for e in envs),
        ]
        for i, r in enumerate(evals)
    ]
    return _table(header, body)


def mixture_sections(run_dir: Path, rl: list[Row], evals: list[Row]) -> list[tuple[str, str]]:
    """The ``(heading, HTML)`` sections of a mixture run ([] for a single-env run)."""
    envs = mixture_env_ids(run_dir)
    if not envs:
        return []
    counts = eval_counts(run_dir)
    out = [("Held-out success per env", _overview(envs, evals, counts))]
    for env in envs:
        prefix = f"eval/{env}/"
        rows = [_as_single(r, prefix) for r in evals]
        rows = [r for r in rows if "eval/success" in r]
        single = _env_counts(counts, prefix)
        held_out = _eval_plot(rows, single) + _eval_table(rows, single) if rows else NO_DATA
        out.append((f"Held-out evaluation: {env}", held_out))
        keys = [f"rollout/{env}/{k}" for k in _ROLLOUT_KEYS]
        panels = [(k.removeprefix(f"rollout/{env}/"), rl, [k]) for k in keys]
        panels.append(("groups trained", rl, [f"rollout/{env}/groups_trained"]))
        panels.append(("reward std (env.reward_norm)", rl, [f"reward_norm/{env}/std"]))
        out.append((f"Rollouts: {env}", _line_panels(panels, "RL step")))
    return out
