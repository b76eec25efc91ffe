"""Install-time and maintenance commands of ``swe-repo-v0``::

python -m agentic_rl.envs.swe_repo fetch              # the pinned sdists into the user cache
python -m agentic_rl.envs.swe_repo check              # which repositories are fetched
python -m agentic_rl.envs.swe_repo verify [--sample N]  # re-run the shipped bugs
python -m agentic_rl.envs.swe_repo build [--per-repo N] # rebuild the catalogue (~15 min)
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from agentic_rl.envs.swe_repo.catalogue import (
    CATALOGUE_PATH,
    build_catalogue,
    load_catalogue,
    verify_catalogue,
    write_catalogue,
)
from agentic_rl.envs.swe_repo.repos import REPOS, fetch, missing


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (1: something missing or not verified)."""
    parser = argparse.ArgumentParser(prog="python -m agentic_rl.envs.swe_repo")
    parser.add_argument("command", choices=["fetch", "check", "verify", "build"])
    parser.add_argument("--sample", type=int, default=0, help="verify: only N drawn bugs")
    parser.add_argument("--per-repo", type=int, default=36, help="build: bugs per repository")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        for spec in REPOS:
            print(f"{spec.key}: {fetch(spec)}", flush=True)
        return 0
    if args.command == "check":
        absent = missing()
        for spec in REPOS:
            print(f"{spec.key}: {'missing' if spec in absent else 'fetched'}")
        return 1 if absent else 0
    if args.command == "build":
        started = time.perf_counter()
        write_catalogue(build_catalogue(args.per_repo, log=lambda m: print(m, flush=True)))
        print(f"wrote {CATALOGUE_PATH} in {time.perf_counter() - started:.0f} s")
        return 0
    bugs = load_catalogue()
    if args.sample:
        bugs = random.Random(0).sample(bugs, min(args.sample, len(bugs)))
    problems = verify_catalogue(bugs, log=lambda m: print(m, flush=True))
    for problem in problems:
        print(problem)
    print(f"{len(bugs) - len(problems)} of {len(bugs)} bugs verified")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
