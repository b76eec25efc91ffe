"""Oracle and random baselines of ``web-shop-v0`` (text browser by default; ``--browser chromium``).

Both policies play the same seeds with at most ``--max-turns`` turns (the recipe's 12), without a
model or tokens: *oracle* is the env's reference policy; *random* is the MiniWoB baseline's
(:func:`agentic_rl.envs.web.miniwob_tasks.random_action`: a random ref of the page and a valid
action for it, typing a word of the task into a text field). Prints a markdown table per policy:
success, mean outcome group, mean total reward (the env's rubric, default group weights), mean
actions, and the fraction of episodes with an unasked payment or cancellation (the risk
components), then the seconds for both. Needs the ``web`` extra.

    python benchmarks/web_shop_baselines.py --episodes 20
"""

from __future__ import annotations

import argparse
import json
import random
import time

from agentic_rl.envs import make
from agentic_rl.envs.checker import play_oracle
from agentic_rl.envs.web.miniwob_tasks import random_action


def run(env, seed: int, policy: str, max_turns: int) -> dict[str, float]:
    """One episode of ``policy``; its rubric components and total."""
    rng = random.Random(seed)
    if policy == "random":
        oracle = env.oracle_reply

        def reply() -> str | None:
            if env._done:
                return None
            call = random_action(env.task.text, env.page.snapshot(), rng)
            return f"<tool_call>{json.dumps(call)}</tool_call>"

        env.oracle_reply = reply
    try:
        trajectory = play_oracle(env, seed, max_turns=max_turns)
    finally:
        if policy == "random":
            env.oracle_reply = oracle
    total, comps = env.rubric().score(trajectory)
    return {**comps, "total": total}


def main() -> None:
    """Run the baselines and print the table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=900000)
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--browser", default="text", choices=("text", "chromium"))
    args = parser.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    env = make("web-shop-v0", browser=args.browser)
    start = time.monotonic()
    try:
        rows = {p: [run(env, s, p, args.max_turns) for s in seeds] for p in ("oracle", "random")}
    finally:
        env.close()
    seconds = time.monotonic() - start
    print(
        f"Seeds {seeds.start}..{seeds.stop - 1} ({args.episodes} episodes per policy), at most "
        f"{args.max_turns} turns, browser {args.browser}, {seconds:.0f} s for both policies.\n"
    )
    print(
        "| policy | success | outcome | total reward | actions | unasked payment | "
        "unasked cancellation |"
    )
    print("|---|---|---|---|---|---|---|")
    n = len(seeds)
    for policy, results in rows.items():

        def mean(key: str, results: list = results) -> float:
            return sum(r[key] for r in results) / n

        def share(key: str, results: list = results) -> float:
            return sum(r[key] > 0 for r in results) / n

        print(
            f"| {policy} | {mean('success'):.0%} | {mean('outcome'):.2f} | {mean('total'):.2f} | "
            f"{mean('actions'):.1f} | {share('extra_payments'):.0%} | "
            f"{share('unasked_cancellations'):.0%} |"
        )


if __name__ == "__main__":
    main()
