"""The oracle of ``swe-repo-v0`` on every bug of the catalogue: success, turns, tool calls, time.

Each bug is played once through the env's own tools (``levels=["hard"]`` draws from every
repository; seed ``i`` plays bug ``i`` of that pool), scored with the env's rubric. A bug the
oracle cannot fix is listed. Usage::

    python benchmarks/swe_repo_oracle.py [--repos inflection,parse] [--limit N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

from agentic_rl.envs import make
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action


def play(env, seed: int) -> tuple[bool, int, int, float]:
    """``(resolved, turns, tool calls, seconds)`` of the oracle's episode on ``seed``."""
    started = time.perf_counter()
    env.reset(seed=seed)
    turns = calls = 0
    terminated, info = False, {}
    while not terminated:
        reply = env.oracle_reply()
        tool_calls, errors = parse_tool_calls(reply, turn_index=turns)
        _, _, terminated, truncated, info = env.step(Action(reply, tool_calls, errors))
        turns, calls = turns + 1, calls + len(tool_calls)
        if truncated:
            break
    return bool(info.get("resolved")), turns, calls, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Play every bug; print the totals and the failures. Exit status 1 if any failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", default=None, help="comma-separated repository names")
    parser.add_argument("--limit", type=int, default=0, help="only the first N bugs")
    args = parser.parse_args(argv)
    repos = args.repos.split(",") if args.repos else None
    env = make("swe-repo-v0", levels=["hard"], repos=repos)
    pool = env.pools["hard"][: args.limit or None]
    results, failed = [], []
    try:
        for seed, bug in enumerate(pool):
            resolved, turns, calls, seconds = play(env, seed)
            results.append((bug.repo, resolved, turns, calls, seconds))
            if not resolved:
                failed.append(bug.id)
    finally:
        env.close()
    by_repo = Counter(r[0] for r in results)
    solved = Counter(r[0] for r in results if r[1])
    for repo in sorted(by_repo):
        print(f"{repo}: {solved[repo]}/{by_repo[repo]}")
    print(
        f"oracle: {sum(solved.values())}/{len(results)} resolved; turns "
        f"{statistics.mean(r[2] for r in results):.1f}, tool calls "
        f"{statistics.mean(r[3] for r in results):.1f}, "
        f"{statistics.median(r[4] for r in results):.1f} s per episode (median)"
    )
    for bug_id in failed:
        print(f"not resolved: {bug_id}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
