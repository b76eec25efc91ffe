"""Write a run's ``report.html``: one self-contained HTML file with plots and tables.

Inputs, all in the run directory (each optional; a missing or empty one shows "no data"):

* ``metrics.jsonl``: one JSON object per line with ``phase`` (``warmup``, ``rl`` or ``eval``),
  ``step`` and namespaced numeric metrics (``rollout/reward/<component>``,
  ``rollout/reward_total``, ``train/loss``, ``train/kl``, ``eval/success/<level>``, ...). Eval
  rows also carry a ``tag`` (``base``, ``warmup``, ``rl-step-10``, ``final``). Lines that do not
  parse are skipped; metrics the report does not know are ignored.
* ``config.toml``: the resolved config, shown verbatim.
* ``summary.json``: a JSON object shown as a key/value table.
* ``trajectories/``: the trajectory store; per RL step it gives stop-reason fractions, tool
  calls and tool error rate, and episode lengths (see :func:`store_rows`); its eval records
  give each held-out point's successes and number of tasks (overall and per level), hence a
  95 % Wilson interval (:func:`agentic_rl.trainer.evaluation.intervals.wilson_interval`) on every held-out
  success in the plot (error bars) and the table. Without them the overall interval uses
  ``config.toml``'s ``eval.size`` as n; a point whose n is unknown is shown without one.

Plots are PNGs rendered with matplotlib's Agg canvas (no pyplot, no global backend switch)
and embedded as base64 ``data:`` URIs, so the file needs no external assets. All text taken
from the inputs is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from agentic_rl.trainer.records.report_data import (
    EvalCounts,
    EvalOutcomes,
    Row,
    as_number,
    eval_counts,
    eval_outcomes,
    load_metrics,
    store_rows,
)

# the run-data readers are re-exported: they were first defined here
__all__ = [
    "EvalCounts",
    "EvalOutcomes",
    "eval_counts",
    "eval_outcomes",
    "load_metrics",
    "render_report",
    "store_rows",
    "write_report",
]

NO_DATA = '<p class="nodata">no data</p>'

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
img { max-width: 100%; } .nodata { color: #888; font-style: italic; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; }
"""


def _series(rows: list[Row], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key`` over ``rows`` that have both a numeric step and value."""
    xs, ys = [], []
    for i, row in enumerate(rows):
        y = as_number(row.get(key))
        if y is None:
            continue
        x = as_number(row.get("step"))
        xs.append(float(i) if x is None else x)
        ys.append(y)
    return xs, ys


def _keys_with_prefix(rows: list[Row], prefix: str) -> list[str]:
    """Numeric-valued keys of ``rows`` that start with ``prefix``, in first-seen order."""
    found = {
        k: None
        for row in rows
        for k, v in row.items()
        if k.startswith(prefix) and as_number(v) is not None
    }
    return list(found)


def _png(fig: Figure) -> str:
    """Render ``fig`` as an ``<img>`` tag holding a base64 PNG."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _line_panels(panels: list[tuple[str, list[Row], list[str]]], xlabel: str) -> str:
    """One subplot per (title, rows, keys) panel that has data, three per row; NO_DATA when none has."""
    drawn = []
    for title, rows, keys in panels:
        lines = [(key, _series(rows, key)) for key in keys]
        lines = [(key, xy) for key, xy in lines if xy[1]]
        if lines:
            drawn.append((title, lines))
    if not drawn:
        return NO_DATA
    cols = min(len(drawn), 3)
    nrows = -(-len(drawn) // cols)
    fig = Figure(figsize=(5.5 * cols, 3.8 * nrows), layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax in axes[len(drawn) :]:
        ax.set_visible(False)
    for ax, (title, lines) in zip(axes, drawn):
        for key, (xs, ys) in lines:
            ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=key)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize="small")
    return _png(fig)


def _eval_label(row: Row, index: int) -> str:
    tag = row.get("tag")
    if tag is not None:
        return str(tag)
    step = row.get("step")
    return f"#{index}" if step is None else f"step {step}"


def _interval(row: Row, key: str, counts: EvalCounts) -> tuple[float, float] | None:
    """95 % Wilson interval of ``row[key]`` (a success rate) when its n is known and agrees."""
    from agentic_rl.trainer.evaluation.intervals import wilson_interval

    value = as_number(row.get(key))
    if value is None:
        return None
    cell = counts.get(str(row.get("tag")), {}).get(key)
    if cell is None and key == "eval/success" and "*" in counts:
        n = counts["*"]["eval/success"][1]
        cell = (round(value * n), n)
    if cell is None or abs(cell[0] / cell[1] - value) > 1e-6:  # not the numbers this row reports
        return None
    w = wilson_interval(*cell)
    return w.low, w.high


def _eval_plot(evals: list[Row], counts: EvalCounts) -> str:
    """Held-out success per eval row (file order, tag as tick label): overall + per level, with
    95 % Wilson error bars where the number of tasks is known."""
    keys = ["eval/success"] + _keys_with_prefix(evals, "eval/success/")
    fig, drew = Figure(figsize=(9, 4)), False
    ax = fig.subplots()
    for j, key in enumerate(keys):
        points = [
            (i, as_number(r.get(key)), _interval(r, key, counts)) for i, r in enumerate(evals)
        ]
        points = [(i + 0.04 * j, y, ci or (y, y)) for i, y, ci in points if y is not None]
        if points:
            drew = True
            xs, ys, cis = zip(*points)
            # max(0, ·): at 0/n or n/n the Wilson bound equals the point up to rounding (-1e-17)
            yerr = [
                [max(0.0, y - lo) for y, (lo, _) in zip(ys, cis)],
                [max(0.0, hi - y) for y, (_, hi) in zip(ys, cis)],
            ]
            ax.errorbar(
                xs,
                ys,
                yerr=yerr,
                capsize=3,
                marker="o",
                label="overall" if key == "eval/success" else key.removeprefix("eval/success/"),
                linewidth=2.5 if key == "eval/success" else 1.2,
            )
    if not drew:
        return NO_DATA
    ax.set_xticks(
        range(len(evals)), [_eval_label(r, i) for i, r in enumerate(evals)], rotation=30, ha="right"
    )
    ax.set_ylabel("success rate (95 % Wilson CI)")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("held-out success")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def _format(value: Any) -> str:
    """A table cell: ints as is, floats to 3 decimals, other values as (escaped) JSON text."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return html.escape(value)
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) and abs(value) >= 1e4 else f"{value:.3f}"
    return html.escape(json.dumps(value))


def _table(header: list[str], body: list[list[str]]) -> str:
    """An HTML table; ``header`` is escaped here, ``body`` cells must be escaped already."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _success_cell(row: Row, key: str, counts: EvalCounts) -> str:
    """``0.500 [0.404, 0.596]``: the success rate and its 95 % Wilson interval (when n is known)."""
    ci = _interval(row, key, counts)
    cell = _format(row.get(key))
    return cell if ci is None else f"{cell} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _eval_table(evals: list[Row], counts: EvalCounts) -> str:
    """Every eval row: tag, step, tasks, overall success, success per level (with 95 % Wilson
    intervals where the number of tasks is known), tool calls."""
    if not evals:
        return NO_DATA
    levels = _keys_with_prefix(evals, "eval/success/")
    header = [
        "tag",
        "step",
        "tasks",
        "success [95 % CI]",
        *(k.removeprefix("eval/success/") for k in levels),
        "tool calls",
    ]

    def tasks(r: Row) -> str:
        cell = counts.get(str(r.get("tag")), {}).get("eval/success") or counts.get("*", {}).get(
            "eval/success"
        )
        return "–" if cell is None else str(cell[1])

    body = [
        [
            html.escape(_eval_label(r, i)),
            _format(r.get("step")),
            tasks(r),
            *(_success_cell(r, c, counts) for c in ["eval/success", *levels]),
            _format(r.get("eval/tool_calls")),
        ]
        for i, r in enumerate(evals)
    ]
    note = (
        "<p>Intervals: 95 % Wilson score intervals of successes/tasks (Wilson 1927); "
        "a cell without one has no known number of tasks.</p>"
    )
    return _table(header, body) + note


def _eval_section(run_dir: Path, evals: list[Row]) -> str:
    if not evals:
        return NO_DATA
    counts = eval_counts(run_dir)
    return _eval_plot(evals, counts) + _eval_table(evals, counts)


def _summary_section(path: Path) -> str:
    if not path.is_file():
        return NO_DATA
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        return f'<p class="nodata">unreadable summary.json: {html.escape(str(exc))}</p>'
    if not isinstance(summary, dict) or not summary:
        return NO_DATA
    body = [[html.escape(str(k)), _format(v)] for k, v in summary.items()]
    return _table(["key", "value"], body)


def _config_section(path: Path) -> str:
    if not path.is_file():
        return NO_DATA
    text = path.read_text(encoding="utf-8", errors="replace")
    return f"<pre>{html.escape(text)}</pre>" if text.strip() else NO_DATA


def _store_panels(run_dir: Path) -> list[tuple[str, list[Row], list[str]]]:
    rows = store_rows(run_dir)
    stops = _keys_with_prefix(rows, "stop/")
    return [
        ("stop reasons (fraction)", rows, stops),
        ("tool calls per episode", rows, ["tools/calls_per_episode"]),
        ("tool error rate", rows, ["tools/error_rate"]),
        ("tokens per episode", rows, ["length/generated_tokens", "length/total_tokens"]),
    ]


def _by_phase(rows: list[Row]) -> tuple[list[Row], list[Row], list[Row]]:
    """The ``warmup``, ``rl`` and ``eval`` rows of ``rows`` (others dropped), in order."""
    by_phase: dict[str, list[Row]] = {"warmup": [], "rl": [], "eval": []}
    for row in rows:
        if row.get("phase") in by_phase:
            by_phase[row["phase"]].append(row)
    return by_phase["warmup"], by_phase["rl"], by_phase["eval"]


def _panels_of(rows: list[Row], prefix: str, keys: tuple[str, ...]) -> list[tuple]:
    """One single-line panel per key, titled by the key without ``prefix``."""
    return [(k.removeprefix(prefix), rows, [k]) for k in keys]


def _reward_section(rl: list[Row]) -> str:
    groups = [
        "rollout/reward/outcome",
        "rollout/reward/process",
        "rollout/reward/cost",
        "rollout/reward/risk",
    ]
    components = [k for k in _keys_with_prefix(rl, "rollout/reward/") if k not in groups]
    return _line_panels(
        [("total and groups (before λ)", rl, ["rollout/reward_total", *groups])], "RL step"
    ) + _line_panels(_panels_of(rl, "rollout/reward/", tuple(components)), "RL step")


def _sections(
    run_dir: Path, warmup: list[Row], rl: list[Row], evals: list[Row]
) -> list[tuple[str, str]]:
    """The report's ``(heading, HTML)`` sections, in order (a mixture run's per-env sections,
    :mod:`agentic_rl.trainer.records.report_mixture`, after the pooled held-out evaluation)."""
    from agentic_rl.trainer.records.report_mixture import mixture_sections  # it imports this module

    rollouts = (
        "rollout/success",
        "rollout/turns",
        "rollout/tool_calls",
        "rollout/generated_tokens",
    )
    return [
        ("Summary", _summary_section(run_dir / "summary.json")),
        ("Held-out evaluation", _eval_section(run_dir, evals)),
        *mixture_sections(run_dir, rl, evals),
        ("RL reward", _reward_section(rl)),
        (
            "Loss",
            _line_panels(
                [("warm-up loss", warmup, ["train/loss"]), ("RL loss", rl, ["train/loss"])], "step"
            ),
        ),
        (
            "KL, clip fraction, entropy",
            _line_panels(
                _panels_of(rl, "train/", ("train/kl", "train/clip_fraction", "train/entropy")),
                "RL step",
            ),
        ),
        ("Rollouts", _line_panels(_panels_of(rl, "rollout/", rollouts), "RL step")),
        (
            "Trajectories: stop reasons, tool calls, lengths",
            _line_panels(_store_panels(run_dir), "RL step"),
        ),
        (
            "Throughput",
            _line_panels(
                _panels_of(rl, "perf/", ("perf/step_time_s", "perf/tokens_per_s")), "RL step"
            ),
        ),
        ("Config", _config_section(run_dir / "config.toml")),
    ]


def render_report(run_dir: Path) -> str:
    """Return the report of ``run_dir`` as an HTML string (see the module docstring).

    Raises:
        OSError: an input file exists but cannot be read.
    """
    run_dir = Path(run_dir)
    warmup, rl, evals = _by_phase(load_metrics(run_dir / "metrics.jsonl"))
    sections = _sections(run_dir, warmup, rl, evals)
    title = html.escape(f"agentic-rl report: {run_dir.resolve().name}")
    body = "\n".join(f"<h2>{html.escape(name)}</h2>\n{content}" for name, content in sections)
    counts = html.escape(f"{len(warmup)} warm-up, {len(rl)} RL and {len(evals)} eval rows")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{_CSS}</style></head>\n<body><h1>{title}</h1><p>{counts} in metrics.jsonl</p>"
        f"\n{body}\n</body></html>\n"
    )


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/report.html`` (atomically, via a temporary file) and return its path.

    Missing or empty inputs become "no data" sections; unknown metrics are ignored.

    Raises:
        FileNotFoundError: ``run_dir`` does not exist.
        OSError: an input cannot be read or the report cannot be written.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    out = run_dir / "report.html"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_report(run_dir), encoding="utf-8")
    os.replace(tmp, out)
    return out
