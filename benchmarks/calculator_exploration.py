"""How often does the warm-up policy ever sample a success on calculator-v0's hard tasks?

GRPO and DAPO's dynamic sampling learn only from groups whose G rollouts differ in outcome. A
task kind on which no rollout of a group ever succeeds is an *exploration wall*: RL cannot lift
it, however the credit is assigned. This script measures that wall for a warm-up variant: it
runs the recipe's warm-up (``--set`` overrides apply, e.g. ``warmup.lr=2e-5``), then samples
``algorithm.group_size`` rollouts at the rollout temperature of each of ``--tasks`` training
tasks of the ``multi_op`` and ``word`` levels (seeds from 300,000, away from the warm-up and
held-out seeds), and prints per task kind:

- ``pass@G``: the share of groups with at least one success (the chance a group is informative),
- ``mean``: the mean rollout success,
- ``multi-call``: rollouts that made more than one calculator call.

Task kinds split each level by whether the reference expression has parentheses (the
``(a op b) op c`` form of ``multi_op``, the ``(a + b) * c`` templates of ``word``).

Usage::

    python benchmarks/calculator_exploration.py [--tasks 48] [--set KEY=VALUE ...]

The run directory (warm-up trajectories, metrics) goes to a temporary folder under ``--out``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from agentic_rl.config import load_config
from agentic_rl.envs.calculator.tasks import make_task
from agentic_rl.rollout import run_episodes
from agentic_rl.trainer.evaluation.held_out import is_success
from agentic_rl.trainer.parallel.scale_out import scale_out
from agentic_rl.trainer.recipe import warmup
from agentic_rl.trainer.run import env_kwargs, setup


def task_kind(seed: int) -> str:
    """``level`` or ``level-paren`` of a calculator-v0 task seed (all three levels)."""
    task = make_task(seed)
    return task.level + ("-paren" if "(" in task.expression else "")


def probe(overrides: list[str], n_tasks: int, out: Path) -> dict[str, dict[str, float]]:
    """Warm up with ``overrides`` and sample G rollouts of ``n_tasks`` hard tasks; per kind:
    groups, pass@G, mean success and multi-call rollouts."""
    cfg = load_config(None, ["eval.base=false", *overrides])
    seeds = [s for s in range(300_000, 302_000) if make_task(s).level != "direct"][:n_tasks]
    g = cfg.algorithm.group_size
    by_kind: dict[str, list[list[bool]]] = defaultdict(list)
    multi: dict[str, int] = defaultdict(int)
    with scale_out(cfg) as scale:
        run = setup(cfg, Path(tempfile.mkdtemp(prefix="probe-", dir=out)), scale)
        warmup(run, lambda *_: None)
        for i in range(0, len(seeds), 8):
            chunk = [s for s in seeds[i : i + 8] for _ in range(g)]
            envs = [scale.make_env(cfg.env.id, **env_kwargs(run)) for _ in chunk]
            trajs = run_episodes(
                run.policy, run.chat, envs, chunk, [f"probe-{s}" for s in chunk], cfg.rollout,
                sample_seed=cfg.seed * 1_000_003 + i,
            )  # fmt: skip
            rubric = envs[0].rubric(cfg.reward)
            for env in envs:
                env.close()
            run.policy.clear_cache()
            for j in range(0, len(trajs), g):
                group = [rubric.apply(t) for t in trajs[j : j + g]]
                kind = task_kind(int(group[0].seed))
                by_kind[kind].append([is_success(t) for t in group])
                multi[kind] += sum(
                    sum(1 for turn in t.turns if turn.action.tool_calls) > 1 for t in group
                )
    return {
        kind: {
            "groups": len(groups),
            "pass_at_g": sum(any(x) for x in groups) / len(groups),
            "mean": sum(sum(x) / len(x) for x in groups) / len(groups),
            "multi_call": multi[kind],
        }
        for kind, groups in sorted(by_kind.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=48, help="multi_op and word tasks sampled")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    started = time.perf_counter()
    rows = probe(args.set, args.tasks, args.out)
    print(f"overrides {args.set}  ({time.perf_counter() - started:.0f} s)")
    for kind, row in rows.items():
        print(
            f"  {kind:16s} groups {row['groups']:3d}  pass@G {row['pass_at_g']:.2f}  "
            f"mean {row['mean']:.2f}  multi-call {row['multi_call']}"
        )


if __name__ == "__main__":
    main()
