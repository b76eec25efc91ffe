"""Credit-assignment methods at equal wall-clock budget: GRPO vs GiGPO vs PPO/GAE vs turn-level credit.

For each env, one warm-up (supervised fine-tuning on the env oracle's demonstrations, the same
for every method) gives the common starting model; then each ``algorithm.name`` trains from it
through the normal recipe for the same budget of RL seconds (``algorithm.time_budget_s``:
rollouts + updates; evaluations are not counted), with greedy evaluations on the same held-out
seeds every ``--eval-every`` steps and at the end. Same seeds, same tasks, same budgets: only the
credit assignment differs.

Writes into ``--out``: ``results.json`` (every run's curves and final numbers), ``table.md``
(one row per env × method) and ``curves.png`` (per env: training reward and eval success
against RL seconds). The run directories stay under ``--out/<env>/``.

Usage (the comparison of issue 7 — hours of CPU, run it alone under the heavy-job lock)::

    flock /tmp/agentic-rl-heavy.lock .venv/bin/python benchmarks/compare_credit.py \\
        --out runs/credit-comparison --budget-s 1800 \\
        --envs calculator-v0 search-qa-v0 --algorithms grpo gigpo ppo turn_grpo

``--warmup-from OUT`` starts every method from the warm-up of an earlier comparison's ``--out``
folder (same eval size and seeds) instead of warming up again.

Extra recipe keys go through ``--set key=value`` (as ``agentic-rl train --set``), e.g.
``--set algorithm.group_size=4``. ``--model`` takes ``default`` or a HF model directory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

DEFAULT_ALGORITHMS = ("grpo", "gigpo", "ppo", "turn_grpo")
DEFAULT_ENVS = ("calculator-v0", "search-qa-v0")


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def warm_start(base: list[str], env_dir: Path, progress) -> tuple[Path, dict[str, Any] | None]:
    """Warm-up once for an env; returns the model directory every method starts from and the
    warm-up's eval row (the common starting point of the curves)."""
    from agentic_rl.config import load_config, save_config
    from agentic_rl.trainer.recipe import run_eval, setup, warmup
    from agentic_rl.trainer.records.run_dir import new_run_dir

    config = load_config(None, [*base, "name='warmup'"])
    run_dir = new_run_dir(config.output_dir, config.name)
    save_config(config, run_dir / "config.toml")
    run = setup(config, run_dir)
    warmup(run, progress)
    row = run_eval(run, "warmup", 0, progress)
    out = run_dir / "start_model"
    run.model.save_pretrained(out)
    run.tokenizer.save_pretrained(out)
    return out, row


def reuse_warm_start(previous_env_dir: Path) -> tuple[Path, dict[str, Any] | None]:
    """The warm-up of an earlier comparison of the same env (``<out>/<env>/warmup``): its saved
    start model and its warm-up eval row, so a longer comparison does not redo the warm-up.

    Raises:
        FileNotFoundError: no ``warmup/start_model`` or no warm-up eval row under the folder.
    """
    run_dir = previous_env_dir / "warmup"
    model = run_dir / "start_model"
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"no warm-up model at {model} (run a comparison there first)")
    rows = [r for r in _rows(run_dir) if r.get("phase") == "eval" and r.get("tag") == "warmup"]
    if not rows:
        raise FileNotFoundError(f"no warm-up eval row in {run_dir / 'metrics.jsonl'}")
    return model, rows[-1]


def identical_rollouts(run_dir: Path, ref_dir: Path) -> dict[int, float]:
    """Per RL step both runs took: the fraction of ``run_dir``'s rollouts whose token ids equal
    those of the same episode (same task seed, same place in its group) in ``ref_dir``.

    Every method starts from the same model and samples with the same per-episode seeds, so
    until the updates differ enough to flip a sampled token the rollouts are identical: 1.0
    means the credit assignments have not yet changed what the policy samples.
    """
    from agentic_rl.trajectories.store import TrajectoryStore

    def streams(path: Path) -> dict[tuple[int, str, int], tuple[int, ...]]:
        out, seen = {}, {}
        for rec in TrajectoryStore(path / "trajectories", read_only=True).read(phase="rl"):
            key = (rec["rl_step"], rec["group_id"])
            seen[key] = seen.get(key, -1) + 1
            out[(*key, seen[key])] = tuple(rec["token_ids"])
        return out

    mine, ref = streams(run_dir), streams(ref_dir)
    per_step: dict[int, list[bool]] = {}
    for key, ids in mine.items():
        if key in ref:
            per_step.setdefault(key[0], []).append(ids == ref[key])
    return {step: sum(v) / len(v) for step, v in sorted(per_step.items())}


def _curves(run_dir: Path, start: dict[str, Any] | None) -> dict[str, Any]:
    rows = _rows(run_dir)
    rl = [r for r in rows if r.get("phase") == "rl"]
    seconds, clock = {0: 0.0}, 0.0
    train = []
    for r in rl:
        clock += r["perf/step_time_s"]
        seconds[r["rl_step"]] = clock
        train.append(
            {
                "rl_step": r["rl_step"],
                "seconds": clock,
                "reward": r.get("rollout/reward_total"),
                "success": r.get("rollout/success"),
            }
        )
    evals = (
        [
            {
                "rl_step": 0,
                "seconds": 0.0,
                "success": start.get("eval/success"),
                "reward": start.get("eval/reward_total"),
            }
        ]
        if start
        else []
    )
    for r in rows:
        if r.get("phase") == "eval" and r.get("tag") not in ("base", "warmup"):
            evals.append(
                {
                    "rl_step": r["rl_step"],
                    "seconds": seconds.get(r["rl_step"], clock),
                    "success": r.get("eval/success"),
                    "reward": r.get("eval/reward_total"),
                }
            )
    final = evals[-1] if evals else {}
    return {
        "run_dir": str(run_dir),
        "rl_steps": len(rl),
        "rl_seconds": clock,
        "train": train,
        "evals": evals,
        "final_success": final.get("success"),
        "final_reward": final.get("reward"),
        "start_success": start.get("eval/success") if start else None,
    }


def run_comparison(args: argparse.Namespace, progress=lambda *a: None) -> dict[str, Any]:
    """Warm-up per env, then every method for ``args.budget_s`` RL seconds; returns the results."""
    from agentic_rl.cli.main import (
        _env_overrides,
    )  # env.id plus the env's recipe defaults, as `train --env`
    from agentic_rl.config import load_config
    from agentic_rl.trainer.recipe import train

    results: dict[str, Any] = {"budget_s": args.budget_s, "envs": {}}
    for env_id in args.envs:
        env_dir = Path(args.out) / env_id
        base = _env_overrides(
            env_id,
            [
                f"model.path='{args.model}'",
                f"output_dir='{env_dir}'",
                f"eval.size={args.eval_size}",
                "eval.base=false",
                *args.set,
            ],
        )
        if args.no_warmup:
            start_model, start_row = Path(args.model), None
        elif args.warmup_from:
            start_model, start_row = reuse_warm_start(Path(args.warmup_from) / env_id)
        else:
            start_model, start_row = warm_start(base, env_dir, progress)
        per_env = {}
        for name in args.algorithms:
            print(f"[{env_id}] {name}: {args.budget_s:g} s of RL", file=sys.stderr, flush=True)
            config = load_config(
                None,
                [
                    *base,
                    f"model.path='{start_model}'",
                    "warmup.enabled=false",
                    f"name='{name}'",
                    f"algorithm.name='{name}'",
                    f"algorithm.steps={args.max_steps}",
                    f"algorithm.time_budget_s={args.budget_s}",
                    f"eval.every={args.eval_every}",
                    f"checkpoint_every={args.max_steps}",
                ],
            )
            per_env[name] = _curves(train(config, progress=progress), start_row)
        first = next(iter(per_env.values()))
        for _name, r in list(per_env.items())[1:]:
            r["identical_to_first"] = identical_rollouts(Path(r["run_dir"]), Path(first["run_dir"]))
        results["envs"][env_id] = per_env
    return results


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.0%}" if pct else f"{x:.3f}"


def write_table(results: dict[str, Any], path: Path) -> str:
    """Markdown table, one row per env × method; returns the text."""
    lines = [
        f"RL budget per method: {results['budget_s']:g} s (rollouts + updates; evals not counted)",
        "",
        "| env | method | RL steps | RL s | start success | final success | final reward "
        "| rollouts identical to the first method's |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for env_id, per_env in results["envs"].items():
        for name, r in per_env.items():
            same = r.get("identical_to_first")
            same_text = (
                "–"
                if not same
                else (
                    f"{sum(same.values()) / len(same):.0%} (last step {_fmt(same[max(same, key=int)], True)})"
                )
            )
            lines.append(
                f"| {env_id} | {name} | {r['rl_steps']} | {r['rl_seconds']:.0f} | "
                f"{_fmt(r['start_success'], True)} | {_fmt(r['final_success'], True)} | "
                f"{_fmt(r['final_reward'])} | {same_text} |"
            )
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def plot_curves(results: dict[str, Any], path: Path) -> None:
    """Per env: training rollout reward (top) and greedy eval success (bottom) vs RL seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(results["envs"])
    fig, axes = plt.subplots(2, len(envs), figsize=(5 * len(envs), 7), squeeze=False)
    for col, env_id in enumerate(envs):
        top, bottom = axes[0][col], axes[1][col]
        for name, r in results["envs"][env_id].items():
            pts = [(p["seconds"], p["reward"]) for p in r["train"] if p["reward"] is not None]
            if pts:
                top.plot(*zip(*pts), label=name, alpha=0.8)
            ev = [(p["seconds"], p["success"]) for p in r["evals"] if p["success"] is not None]
            if ev:
                bottom.plot(*zip(*ev), marker="o", label=name)
        top.set_title(f"{env_id}: rollout reward")
        bottom.set_title(f"{env_id}: greedy eval success")
        bottom.set_xlabel("RL seconds (rollouts + updates)")
        top.legend(fontsize=8)
        bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    p.add_argument("--algorithms", nargs="+", default=list(DEFAULT_ALGORITHMS))
    p.add_argument("--budget-s", type=float, default=1800.0, help="RL seconds per method and env")
    p.add_argument(
        "--model", default="default", help="'default' (SmolLM2-135M) or a HF model directory"
    )
    p.add_argument("--eval-size", type=int, default=50)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument(
        "--max-steps",
        type=int,
        default=10_000,
        help="step cap (the time budget normally ends a run)",
    )
    p.add_argument(
        "--no-warmup", action="store_true", help="start every method from --model directly"
    )
    p.add_argument(
        "--warmup-from",
        metavar="OUT",
        help="reuse the warm-up (start model and its eval) of an earlier "
        "comparison's --out folder; its eval.size/seed must match this one's",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="extra recipe override"
    )
    args = p.parse_args(argv)
    if not args.budget_s > 0:
        p.error("--budget-s must be > 0")
    if args.warmup_from and args.no_warmup:
        p.error("--warmup-from and --no-warmup exclude each other")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run_comparison(args)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(write_table(results, out / "table.md"))
    plot_curves(results, out / "curves.png")
    return results


if __name__ == "__main__":
    main()
