"""A mixture run's held-out figures per env beside single-env runs of the same budget.

Analyses finished run directories (nothing is trained here): one mixture run (``[[env.mix]]``)
and, per env of the mixture, one single-env run of that env. For each env it reads both runs'
held-out evaluations from their trajectory stores (records with ``phase="eval"``, the mixture's
filtered by ``env_id``: :func:`agentic_rl.trainer.records.report_data.eval_outcomes`) and prints:

* warm-up and final success of each run with 95 % Wilson intervals;
* each run's lift (final − warm-up, points) with a paired bootstrap 95 % interval over the
  held-out tasks (the same seeds before and after);
* mixture − single at the final evaluation, paired by task (both runs play the same held-out
  seeds ``eval.seed_start …`` of the env), with its paired bootstrap 95 % interval, and the same
  for the lifts (a per-task difference of differences);
* the budget each run spent on the env: oracle demonstrations (warm-up records of the env) and
  RL groups trained (``rollout/<env>/groups_trained`` of the mixture's RL rows, the single run's
  ``rollout/groups_trained``), and each run's wall time.

Statistics: :mod:`agentic_rl.trainer.evaluation.intervals` (10,000 resamples, seeded). Writes ``--out`` as JSON
(every figure) when given and prints a markdown table.

Usage::

    python benchmarks/mixture_vs_single.py --mixture RUNS/mixture \\
        --single calculator-v0=RUNS/single-calc search-qa-v0=RUNS/single-sq ... [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentic_rl.trainer.evaluation.intervals import (
    DEFAULT_RESAMPLES,
    paired_bootstrap,
    wilson_interval,
)
from agentic_rl.trainer.records.report_data import eval_outcomes, load_metrics, mixture_env_ids
from agentic_rl.trajectories import RUN_STORE_DIRNAME, TrajectoryStore

Outcomes = dict[int, tuple[str | None, bool]]


def _point(tasks: Outcomes) -> dict[str, Any]:
    """Successes, n and the 95 % Wilson interval (fractions) of one eval point."""
    k, n = sum(ok for _, ok in tasks.values()), len(tasks)
    return {"successes": k, "n": n, **wilson_interval(k, n).as_dict()}


def _paired(before: Outcomes, after: Outcomes, *, resamples: int, seed: int) -> dict[str, Any]:
    """mean(after − before) in points over the common tasks, with its paired bootstrap CI."""
    common = sorted(set(before) & set(after))
    if not common:
        raise ValueError("no held-out task in common")
    b = [float(before[s][1]) for s in common]
    a = [float(after[s][1]) for s in common]
    interval = paired_bootstrap(b, a, resamples=resamples, seed=seed)
    return {"n_tasks": len(common), **{k: 100.0 * v for k, v in interval.as_dict().items()}}


def _lift_difference(m: dict[str, Outcomes], s: dict[str, Outcomes], **kw: Any) -> dict[str, Any]:
    """mean over tasks of (mixture lift − single lift), lift = final − warm-up of the task (0/1),
    with a paired bootstrap CI (tasks resampled; points)."""
    common = sorted(set(m["warmup"]) & set(m["final"]) & set(s["warmup"]) & set(s["final"]))
    if not common:
        raise ValueError("no held-out task in common")
    diffs = [
        float((m["final"][t][1] - m["warmup"][t][1]) - (s["final"][t][1] - s["warmup"][t][1]))
        for t in common
    ]
    interval = paired_bootstrap([0.0] * len(common), diffs, **kw)
    return {"n_tasks": len(common), **{k: 100.0 * v for k, v in interval.as_dict().items()}}


def _budget(run_dir: Path, env: str, mixture: bool) -> dict[str, Any]:
    """Demonstrations and RL groups one run spent on ``env``, its RL steps and wall time."""
    store = TrajectoryStore(run_dir / RUN_STORE_DIRNAME, read_only=True)
    demos = sum(1 for _ in store.read(phase="warmup", env_id=env))
    rl = [r for r in load_metrics(run_dir / "metrics.jsonl") if r.get("phase") == "rl"]
    key = f"rollout/{env}/groups_trained" if mixture else "rollout/groups_trained"
    summary = run_dir / "summary.json"
    timings = (
        json.loads(summary.read_text()).get("timings_seconds", {}) if summary.is_file() else {}
    )
    return {
        "demos": demos,
        "rl_steps": len(rl),
        "groups_trained": sum(r.get(key, 0) for r in rl),
        "wall_s": timings.get("total_seconds_this_process"),
    }


def compare(
    mixture: Path,
    singles: dict[str, Path],
    *,
    before: str = "warmup",
    after: str = "final",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Every figure of the module docstring, per env of the mixture (module docstring).

    Raises:
        ValueError: ``mixture`` is not a mixture run, an env has no single run, or a run lacks
            the ``before``/``after`` evaluation of the env.
    """
    envs = mixture_env_ids(mixture)
    if not envs:
        raise ValueError(f"{mixture}: not a mixture run (no [[env.mix]] in its config.toml)")
    missing = [e for e in envs if e not in singles]
    if missing:
        raise ValueError(f"no single-env run given for {missing} (--single ENV=RUN_DIR)")
    kw = {"resamples": resamples, "seed": seed}
    out: dict[str, Any] = {"mixture": str(mixture), "resamples": resamples, "envs": {}}
    for env in envs:
        runs = {"mixture": eval_outcomes(mixture, env_id=env)}
        runs["single"] = eval_outcomes(singles[env], env_id=env)
        for name, outcomes in runs.items():
            lacking = [t for t in (before, after) if t not in outcomes]
            if lacking:
                raise ValueError(f"{env}: the {name} run has no eval tagged {lacking}")
        row: dict[str, Any] = {"single_run": str(singles[env])}
        for name, outcomes in runs.items():
            row[name] = {
                "before": _point(outcomes[before]),
                "after": _point(outcomes[after]),
                "lift_points": _paired(outcomes[before], outcomes[after], **kw),
                "budget": _budget(
                    mixture if name == "mixture" else singles[env], env, name == "mixture"
                ),
            }
        row["mixture_minus_single_final"] = _paired(
            runs["single"][after], runs["mixture"][after], **kw
        )
        renamed = {k: {"warmup": v[before], "final": v[after]} for k, v in runs.items()}
        row["mixture_minus_single_lift"] = _lift_difference(
            renamed["mixture"], renamed["single"], **kw
        )
        out["envs"][env] = row
    return out


def _pct(p: dict[str, Any]) -> str:
    return f"{100 * p['estimate']:.0f} % [{100 * p['low']:.0f}, {100 * p['high']:.0f}]"


def _pts(p: dict[str, Any]) -> str:
    return f"{p['estimate']:+.1f} [{p['low']:+.1f}, {p['high']:+.1f}]"


def markdown_table(result: dict[str, Any]) -> str:
    """One row per env and run, then mixture − single (points, paired 95 % CIs)."""
    lines = [
        "| env | run | demos | RL groups | warm-up [95 % CI] | final [95 % CI] "
        "| lift, points [paired 95 % CI] | mixture − single, final | mixture − single, lift |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for env, row in result["envs"].items():
        for name in ("single", "mixture"):
            r = row[name]
            diff = (
                (_pts(row["mixture_minus_single_final"]), _pts(row["mixture_minus_single_lift"]))
                if name == "mixture"
                else ("", "")
            )
            lines.append(
                f"| {env} | {name} (n={r['after']['n']}) | {r['budget']['demos']} "
                f"| {r['budget']['groups_trained']} | {_pct(r['before'])} | {_pct(r['after'])} "
                f"| {_pts(r['lift_points'])} | {diff[0]} | {diff[1]} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mixture", required=True, type=Path, help="the mixture run directory")
    p.add_argument(
        "--single", nargs="+", required=True, metavar="ENV=RUN_DIR", help="a single-env run per env"
    )
    p.add_argument("--out", type=Path, help="write every figure here as JSON")
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES)
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    args = p.parse_args(argv)
    singles = {}
    for item in args.single:
        env, sep, path = item.partition("=")
        if not sep:
            p.error(f"--single expects ENV=RUN_DIR, got {item!r}")
        singles[env] = Path(path)
    try:
        result = compare(args.mixture, singles, resamples=args.resamples, seed=args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(markdown_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
