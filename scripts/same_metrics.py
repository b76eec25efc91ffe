"""Prove a refactor kept behaviour: run a reduced recipe and compare ``metrics.jsonl`` bitwise.

Usage::

    python scripts/same_metrics.py run OUT_DIR      # the reduced recipes, one run dir each
    python scripts/same_metrics.py compare A B      # exit 0 iff every row is bitwise equal

``run`` trains the default model (SmolLM2-135M-Instruct) on calculator-v0 with each variant of
:data:`VARIANTS` (GRPO with dynamic sampling and guidance as the recipe has them; PPO with its
critic), 2 RL steps of 2 tasks × 4 rollouts, a warm-up on 8 demonstrations and 10 held-out tasks
per evaluation, one torch thread (so float reductions run in one order). Run it on the tree before
and after a change (``PYTHONPATH=<tree>/src``) and ``compare`` the two outputs: every metrics row
must hold the same keys and bitwise-equal values (floats compared by their ``repr``), except the
wall-clock ``perf/`` keys. The stored token ids of every trajectory are compared too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: variant name -> ``--set`` overrides on top of :data:`BASE`
VARIANTS = {
    "grpo": [],
    "ppo": ["algorithm.name='ppo'"],
}
BASE = [
    "algorithm.steps=2",
    "algorithm.tasks_per_step=2",
    "algorithm.group_size=4",
    "sampling.rollout_tasks=2",
    "warmup.num_demos=8",
    "eval.size=10",
    "model.num_threads=1",
    "tracking.tensorboard=false",
]


def run(out: Path) -> None:
    """Train every variant into ``out/<variant>``."""
    from agentic_rl.cli.main import main

    for name, extra in VARIANTS.items():
        sets = [*BASE, *extra, f"output_dir='{out}'", f"name='{name}'"]
        rc = main(["train", *[a for s in sets for a in ("--set", s)]])
        if rc:
            raise SystemExit(f"{name}: train exited {rc}")


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: repr(v) for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def _tokens(run_dir: Path) -> list[tuple]:
    from agentic_rl.trajectories import TrajectoryStore

    records = TrajectoryStore(run_dir / "trajectories").read()
    return sorted((r["phase"], r["step"], tuple(r["token_ids"])) for r in records)


def compare(a: Path, b: Path) -> int:
    """Print per variant whether ``a``'s and ``b``'s rows and token streams are equal; 1 if not."""
    bad = 0
    for name in VARIANTS:
        ra, rb = _rows(a / name), _rows(b / name)
        diff = [i for i, (x, y) in enumerate(zip(ra, rb)) if x != y]
        same_tokens = _tokens(a / name) == _tokens(b / name)
        ok = len(ra) == len(rb) and not diff and same_tokens
        print(f"{name}: {len(ra)} vs {len(rb)} rows, {len(diff)} differ, tokens equal: {same_tokens}")
        for i in diff[:3]:
            keys = sorted(k for k in ra[i].keys() | rb[i].keys() if ra[i].get(k) != rb[i].get(k))
            print(f"  row {i}: {keys[:8]}")
        bad += not ok
    print("bitwise equal" if not bad else "DIFFERENT")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        run(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
