"""Learning benchmark: how much does RL add over the warm-up, per seed, with intervals?

Two modes:

* **train** (default): run a recipe (``agentic-rl train --config FILE --set ...``) once per
  ``--seeds`` value, one run at a time, each in its own subprocess with ``--set seed=K`` (the
  seed sets the RL random stream and the training task order; the held-out tasks stay the
  same), into ``--out/seed-K``; then analyse those runs.
* **analyse** (``--runs DIR [DIR ...]``): analyse existing run directories; nothing is trained.

For each run it reads the held-out evaluations from the trajectory store (``RUN/trajectories``,
records with ``phase="eval"``, one per held-out task and eval tag, read by
:func:`agentic_rl.trainer.records.report.eval_outcomes`: success is ``is_success`` and not failed, the
level is the trajectory info's ``level``) and ``metrics.jsonl`` (``phase="rl"`` rows for the step timings). Per run:
warm-up and final success with 95 % Wilson intervals (overall and per level), the lift
(final − warm-up, in points) with a paired bootstrap 95 % interval over tasks (the same
held-out seeds before and after; 10,000 resamples, seeded), wall time, and the median
``perf/rollout_time_s`` and ``perf/update_time_s`` of the RL steps. Across runs: the mean lift
with a pooled paired bootstrap interval (tasks resampled within each run, the runs' lifts
averaged). Statistics: :mod:`agentic_rl.trainer.evaluation.intervals`.

Writes ``--out/learning.json`` (every figure), ``--out/learning.png`` (held-out success with
Wilson intervals at every eval point, one line per run) and prints a markdown table for the
README.

Usage (training runs are heavy: hours of CPU; run them alone under the heavy-job lock)::

    flock /tmp/agentic-rl-heavy.lock .venv/bin/python benchmarks/learning.py \\
        --seeds 0 1 2 --out runs/learning [--config configs/default.toml] [--set key=value ...]
    .venv/bin/python benchmarks/learning.py --runs runs/a runs/b runs/c --out runs/learning
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentic_rl.trainer.evaluation.intervals import (
    DEFAULT_RESAMPLES,
    paired_bootstrap,
    pooled_paired_bootstrap,
    wilson_interval,
)
from agentic_rl.trainer.records.report import eval_outcomes, load_metrics


def _rate(items: Sequence[bool]) -> dict[str, Any]:
    """Successes, n and the Wilson interval of a list of 0/1 outcomes (fractions)."""
    k, n = sum(items), len(items)
    return {"successes": k, "n": n, **wilson_interval(k, n).as_dict()}


def success_summary(tasks: dict[int, tuple[str | None, bool]]) -> dict[str, Any]:
    """Overall and per-level success of one eval point: ``{"successes", "n", "estimate", "low",
    "high", "levels": {level: {...}}}`` (fractions; 95 % Wilson intervals)."""
    out = _rate([ok for _, ok in tasks.values()])
    levels = sorted({lv for lv, _ in tasks.values() if lv is not None})
    out["levels"] = {lv: _rate([ok for l2, ok in tasks.values() if l2 == lv]) for lv in levels}
    return out


def paired_lift(
    before: dict[int, tuple[str | None, bool]],
    after: dict[int, tuple[str | None, bool]],
    *,
    resamples: int,
    seed: int,
    level: str | None = None,
) -> tuple[dict[str, Any], list, list]:
    """Lift (after − before, in points) on the tasks both evaluated, with its paired bootstrap interval.

    Returns:
        ``({"n_tasks", "estimate", "low", "high"}, before_01, after_01)``: the points and the
        paired 0/1 vectors (task-seed order) for pooling across runs.

    Raises:
        ValueError: no common task (of ``level``, when given).
    """
    common = sorted(s for s in set(before) & set(after) if level is None or before[s][0] == level)
    if not common:
        raise ValueError("no held-out task evaluated both before and after")
    b = [float(before[s][1]) for s in common]
    a = [float(after[s][1]) for s in common]
    interval = paired_bootstrap(b, a, resamples=resamples, seed=seed)
    points = {k: 100.0 * v for k, v in interval.as_dict().items()}
    return {"n_tasks": len(common), **points}, b, a


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def run_perf(run_dir: Path, wall_s: float | None = None) -> dict[str, Any]:
    """Timings of a run: wall time (measured around the subprocess when given, otherwise the
    run's ``summary.json`` ``timings_seconds``) and the median RL-step rollout/update seconds.

    Returns:
        ``{"wall_s", "timings_seconds", "rl_steps", "median_rollout_time_s",
        "median_update_time_s", "median_step_time_s"}`` (seconds; None when unknown).
    """
    rl = [r for r in load_metrics(run_dir / "metrics.jsonl") if r.get("phase") == "rl"]
    timings: dict[str, Any] = {}
    summary = run_dir / "summary.json"
    if summary.is_file():
        try:
            timings = json.loads(summary.read_text()).get("timings_seconds") or {}
        except (ValueError, AttributeError):
            timings = {}
    if wall_s is None:
        wall_s = timings.get("total_seconds_this_process")
    return {
        "wall_s": wall_s,
        "timings_seconds": timings,
        "rl_steps": len(rl),
        "median_rollout_time_s": _median(rl, "perf/rollout_time_s"),
        "median_update_time_s": _median(rl, "perf/update_time_s"),
        "median_step_time_s": _median(rl, "perf/step_time_s"),
    }


def _run_label(run_dir: Path) -> tuple[str, int | None]:
    """(label, config seed) of a run: ``seed K`` from its ``config.toml``, else the folder name."""
    try:
        seed = tomllib.loads((run_dir / "config.toml").read_text()).get("seed")
    except (OSError, tomllib.TOMLDecodeError):
        seed = None
    return (f"seed {seed}" if isinstance(seed, int) else run_dir.name), (
        seed if isinstance(seed, int) else None
    )


def analyse_run(
    run_dir: Path,
    *,
    before: str = "warmup",
    after: str = "final",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    wall_s: float | None = None,
) -> tuple[dict[str, Any], tuple[list, list]]:
    """Every figure of one run (see the module docstring) and its paired 0/1 vectors.

    Returns:
        ``(result, (before_01, after_01))``; ``result`` has ``run_dir``, ``label``, ``seed``,
        ``points`` (every eval tag in order: :func:`success_summary`), ``before``/``after``
        (the two compared points), ``lift_points`` (overall, :func:`paired_lift`),
        ``lift_points_by_level`` and ``perf`` (:func:`run_perf`).

    Raises:
        ValueError: the run lacks the ``before`` or ``after`` eval tag (or its trajectory store),
            or the two share no task.
    """
    outcomes = eval_outcomes(run_dir)
    missing = [t for t in (before, after) if t not in outcomes]
    if missing:
        raise ValueError(
            f"{run_dir}: no held-out eval tagged {missing} in {run_dir / 'trajectories'} "
            f"(found {list(outcomes) or 'none'})"
        )
    label, config_seed = _run_label(run_dir)
    lift, b, a = paired_lift(outcomes[before], outcomes[after], resamples=resamples, seed=seed)
    levels = sorted({lv for lv, _ in outcomes[before].values() if lv is not None})
    by_level = {}
    for lv in levels:
        try:
            by_level[lv] = paired_lift(
                outcomes[before], outcomes[after], resamples=resamples, seed=seed, level=lv
            )[0]
        except ValueError:
            continue
    points = {tag: success_summary(tasks) for tag, tasks in outcomes.items()}
    result = {
        "run_dir": str(run_dir),
        "label": label,
        "seed": config_seed,
        "points": points,
        "before": {"tag": before, **points[before]},
        "after": {"tag": after, **points[after]},
        "lift_points": lift,
        "lift_points_by_level": by_level,
        "perf": run_perf(run_dir, wall_s),
    }
    return result, (b, a)


def analyse(
    runs: Sequence[Path],
    *,
    before: str = "warmup",
    after: str = "final",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    wall_s: Sequence[float | None] | None = None,
) -> dict[str, Any]:
    """Analyse several runs and pool their lifts.

    Returns:
        ``{"before", "after", "resamples", "bootstrap_seed", "confidence", "runs": [analyse_run
        results], "mean_lift_points": {"n_runs", "estimate", "low", "high"}}``.

    Raises:
        ValueError: no runs, or a run fails :func:`analyse_run`.
    """
    if not runs:
        raise ValueError("no run directories to analyse")
    walls = list(wall_s) if wall_s is not None else [None] * len(runs)
    results, pairs = [], []
    for run_dir, wall in zip(runs, walls):
        result, pair = analyse_run(
            Path(run_dir), before=before, after=after, resamples=resamples, seed=seed, wall_s=wall
        )
        results.append(result)
        pairs.append(pair)
    pooled = pooled_paired_bootstrap(pairs, resamples=resamples, seed=seed)
    return {
        "before": before,
        "after": after,
        "resamples": resamples,
        "bootstrap_seed": seed,
        "confidence": 0.95,
        "runs": results,
        "mean_lift_points": {
            "n_runs": len(results),
            **{k: 100.0 * v for k, v in pooled.as_dict().items()},
        },
    }


def _pct(point: dict[str, Any]) -> str:
    return f"{100 * point['estimate']:.0f} % [{100 * point['low']:.0f}, {100 * point['high']:.0f}]"


def _signed(lift: dict[str, Any]) -> str:
    return f"{lift['estimate']:+.1f} [{lift['low']:+.1f}, {lift['high']:+.1f}]"


def markdown_table(summary: dict[str, Any]) -> str:
    """The README table: one row per run and a mean row (success in %, lift in points, 95 % CIs)."""
    header = (
        f"| seed | {summary['before']} [95 % CI] | {summary['after']} [95 % CI] | lift, points [paired 95 % CI] "
        f"| per level {summary['before']} → {summary['after']} | wall time | median rollout / update s |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in summary["runs"]:
        b, a = r["before"], r["after"]
        levels = ", ".join(
            f"{lv} {100 * b['levels'][lv]['estimate']:.0f}→{100 * a['levels'][lv]['estimate']:.0f}"
            for lv in b["levels"]
            if lv in a["levels"]
        )
        perf = r["perf"]
        wall = f"{perf['wall_s'] / 60:.1f} min" if perf["wall_s"] is not None else "–"
        times = " / ".join(
            "–" if perf[k] is None else f"{perf[k]:.1f}"
            for k in ("median_rollout_time_s", "median_update_time_s")
        )
        lines.append(
            f"| {r['label']} (n={b['n']}) | {_pct(b)} | {_pct(a)} | {_signed(r['lift_points'])} "
            f"| {levels or '–'} | {wall} | {times} |"
        )
    m = summary["mean_lift_points"]
    lines.append(f"| mean of {m['n_runs']} | | | {_signed(m)} | | | |")
    return "\n".join(lines)


def _tag_rank(tag: str) -> float:
    """Position of an eval tag on the x axis: base, warmup, rl-step-K by K, final; others last."""
    if tag.startswith("rl-step-") and tag[len("rl-step-") :].isdigit():
        return 1.0 + int(tag[len("rl-step-") :])
    return {"base": -1.0, "warmup": 0.0, "final": 1e18}.get(tag, float("inf"))


def axis_tags(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Every eval tag of ``runs`` (each with ``points``: tag -> interval) on one x axis: base,
    warmup, rl-step-K by K, final, then other tags in first-seen order (runs evaluated at
    different steps interleave)."""
    seen: list[str] = []
    for r in runs:
        seen += [t for t in r["points"] if t not in seen]
    return sorted(seen, key=lambda t: (_tag_rank(t), seen.index(t)))


def plot(summary: dict[str, Any], path: Path) -> Path:
    """Held-out success (%) with 95 % Wilson error bars at every eval point, one line per run (PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tags = axis_tags(summary["runs"])
    fig = Figure(figsize=(max(6.0, 1.1 * len(tags)), 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.25 / max(len(summary["runs"]), 1)
    for j, r in enumerate(summary["runs"]):
        xs = [tags.index(t) + (j - (len(summary["runs"]) - 1) / 2) * width for t in r["points"]]
        ps = list(r["points"].values())
        ys = [100 * p["estimate"] for p in ps]
        err = [  # max(0, ·): at 0/n or n/n the Wilson bound equals the point up to rounding
            [max(0.0, 100 * (p["estimate"] - p["low"])) for p in ps],
            [max(0.0, 100 * (p["high"] - p["estimate"])) for p in ps],
        ]
        ax.errorbar(
            xs,
            ys,
            yerr=err,
            marker="o",
            capsize=3,
            label=f"{r['label']} ({_signed(r['lift_points'])})",
        )
    ax.set_xticks(range(len(tags)), tags, rotation=30, ha="right")
    ax.set_ylabel("held-out success, % (95 % Wilson CI)")
    ax.set_ylim(-3, 103)
    ax.set_title(
        f"mean lift {summary['before']} → {summary['after']}: {_signed(summary['mean_lift_points'])} points"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=110)
    return path


def train_seed(
    seed: int, out: Path, config: str | None, overrides: Sequence[str]
) -> tuple[Path, float]:
    """Run ``agentic-rl train`` for one seed in a subprocess, into ``out/seed-K``; returns (run dir, wall s).

    Raises:
        FileExistsError: ``out/seed-K`` exists (analyse it with ``--runs`` or pick another ``--out``).
        subprocess.CalledProcessError: the training run failed.
    """
    run_dir = out / f"seed-{seed}"
    if run_dir.exists():
        raise FileExistsError(f"{run_dir} exists: analyse it with --runs, or use another --out")
    cmd = [sys.executable, "-m", "agentic_rl.cli", "train"]
    if config:
        cmd += ["--config", config]
    for item in [
        *overrides,
        f"seed={seed}",
        f"output_dir={json.dumps(str(out))}",
        f"name={json.dumps(run_dir.name)}",
    ]:
        cmd += ["--set", item]
    print("+", " ".join(cmd), flush=True)
    started = time.perf_counter()
    subprocess.run(cmd, check=True)
    return run_dir, time.perf_counter() - started


def print_report(summary: dict[str, Any]) -> None:
    """Print per-run figures (per level too), the timings and the markdown table."""
    for r in summary["runs"]:
        print(f"\n## {r['label']}  ({r['run_dir']})")
        for side in ("before", "after"):
            p = r[side]
            levels = "; ".join(f"{lv} {_pct(q)} (n={q['n']})" for lv, q in p["levels"].items())
            print(
                f"  {p['tag']:>8}: {p['successes']}/{p['n']} = {_pct(p)}"
                + (f"   [{levels}]" if levels else "")
            )
        print(
            f"  lift: {_signed(r['lift_points'])} points over {r['lift_points']['n_tasks']} paired tasks"
        )
        for lv, lift in r["lift_points_by_level"].items():
            print(f"    {lv}: {_signed(lift)} (n={lift['n_tasks']})")
        perf = r["perf"]

        def secs(v):
            return "–" if v is None else f"{v:.1f}"

        print(
            f"  wall {secs(perf['wall_s'])} s; RL steps {perf['rl_steps']}; "
            f"median rollout {secs(perf['median_rollout_time_s'])} s, update {secs(perf['median_update_time_s'])} s"
        )
    m = summary["mean_lift_points"]
    print(
        f"\nmean lift over {m['n_runs']} runs: {_signed(m)} points (pooled paired bootstrap, "
        f"{summary['resamples']} resamples)\n"
    )
    print(markdown_table(summary))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--runs",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="analyse these run directories (no training)",
    )
    ap.add_argument(
        "--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds (train mode)"
    )
    ap.add_argument(
        "--config", help="recipe TOML for agentic-rl train (default: the default config)"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="recipe override (repeatable)",
    )
    ap.add_argument(
        "--out", type=Path, default=Path("runs/learning"), help="output folder (runs, JSON, plot)"
    )
    ap.add_argument(
        "--before", default="warmup", help="eval tag the lift starts from (default warmup)"
    )
    ap.add_argument("--after", default="final", help="eval tag the lift ends at (default final)")
    ap.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples")
    ap.add_argument(
        "--bootstrap-seed", type=int, default=0, help="seed of the bootstrap resampling"
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    walls: list[float | None]
    if args.runs:
        runs, walls = list(args.runs), [None] * len(args.runs)
    else:
        runs, walls = [], []
        for seed in args.seeds:  # one heavy run at a time
            run_dir, wall = train_seed(seed, args.out, args.config, args.set)
            runs.append(run_dir)
            walls.append(wall)
    summary = analyse(
        runs,
        before=args.before,
        after=args.after,
        resamples=args.resamples,
        seed=args.bootstrap_seed,
        wall_s=walls,
    )
    summary["command"] = sys.argv if argv is None else ["benchmarks/learning.py", *argv]
    summary["markdown"] = markdown_table(summary)
    (args.out / "learning.json").write_text(json.dumps(summary, indent=2))
    plot(summary, args.out / "learning.png")
    print_report(summary)
    print(f"\nwrote {args.out / 'learning.json'} and {args.out / 'learning.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
