"""Episode step latency of ``swe-repo-v0``: what a ``run_tests`` call, a ``bash`` call, a reset and
the grading cost, per repository, against the same pytest run straight on the host (the peer:
no sandbox, no tool layer), measured in the same run.

For each repository, on the first bug of its catalogue: ``reset`` (a fresh sandbox, the
workspace with its git repository), ``run_tests`` on the bug's first failing test and on the
whole suite, ``bash`` (``git status``), the grading (fresh sandbox, pristine tests, whole suite),
and the host peer (``python -m pytest`` with the same options in a copy of the buggy tree). Medians
of ``--repeats`` runs; the first run of each is a warm-up and not counted. Usage::

    python benchmarks/swe_repo_step.py --repeats 5 [--repos inflection,parse]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentic_rl.envs import make
from agentic_rl.envs.swe_repo.catalogue import repo_tests
from agentic_rl.envs.swe_repo.grading import files_of, grade
from agentic_rl.envs.swe_repo.repos import REPOS
from agentic_rl.envs.swe_repo.tasks import buggy_files
from agentic_rl.envs.swe_repo.testing import PYTEST_ARGS
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action


def _action(name: str, **arguments) -> Action:
    text = f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
    calls, errors = parse_tool_calls(text, turn_index=0)
    return Action(text=text, tool_calls=calls, tool_call_errors=errors)


def _median(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _host_peer(files: dict[str, bytes], spec, targets: list[str]):
    tmp = Path(tempfile.mkdtemp(prefix="swe-bench-peer-"))
    for rel, data in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    if spec.pythonpath:
        env["PYTHONPATH"] = str(tmp / spec.pythonpath)

    def run() -> None:
        cmd = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *targets]
        subprocess.run(cmd, cwd=tmp, env=env, capture_output=True)

    return run


def measure(spec, repeats: int) -> dict[str, float]:
    """Median seconds of each step kind on ``spec``'s first bug of its level (module docstring)."""
    level = {"small": "easy", "medium": "medium", "large": "hard"}[spec.size]
    env = make("swe-repo-v0", repos=[spec.name], levels=[level], max_steps=10_000)
    try:
        env.reset(seed=0)
        bug = env.task.bug
        one, suite = bug.failing[0], " ".join(spec.tests)
        pristine = buggy_files(bug)
        agent = files_of(env.snapshot().files)
        return {
            "reset": _median(lambda: env.reset(seed=0), repeats),
            "one": _median(lambda: env.step(_action("run_tests", target=one)), repeats),
            "suite": _median(lambda: env.step(_action("run_tests", target=suite)), repeats),
            "bash": _median(lambda: env.step(_action("bash", command="git status")), repeats),
            "grade": _median(
                lambda: grade(bug, spec, pristine, agent, env.config, env.test_timeout_s), repeats
            ),
            "host_one": _median(_host_peer(pristine, spec, [one]), repeats),
            "host_suite": _median(_host_peer(pristine, spec, list(spec.tests)), repeats),
        }
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    """Print one markdown row per repository."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--repos", default=None, help="comma-separated repository names (all)")
    args = parser.parse_args(argv)
    names = args.repos.split(",") if args.repos else [spec.name for spec in REPOS]
    unknown = sorted(set(names) - {spec.name for spec in REPOS})
    if unknown:
        parser.error(f"unknown repositories {unknown}; known: {[spec.name for spec in REPOS]}")
    print(
        "| repo | tests | reset | run_tests (1 test) | host pytest (1 test) | ratio | "
        "run_tests (suite) | host pytest (suite) | ratio | bash | grading |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in (spec for spec in REPOS if spec.name in names):
        m = measure(spec, args.repeats)
        print(
            f"| {spec.key} | {repo_tests(spec.name)['passed']} | {m['reset']:.2f} s | "
            f"{m['one']:.2f} s | {m['host_one']:.2f} s | {m['one'] / m['host_one']:.2f}x | "
            f"{m['suite']:.2f} s | {m['host_suite']:.2f} s | {m['suite'] / m['host_suite']:.2f}x | "
            f"{m['bash']:.2f} s | {m['grade']:.2f} s |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
