"""Oracle and random baselines of the MiniWoB++ envs (``miniwob/<task>-v0``) in headless Chromium.

For each task of the set: the scripted oracle and a uniformly random policy
(:func:`agentic_rl.envs.web.miniwob_tasks.random_action`: a random ref of the page and a valid
action for it) play the same seeds, at most ``--max-turns`` turns (the recipe's 8). Prints a
markdown table: success (MiniWoB raw reward 1), mean MiniWoB reward (with its time penalty on the
turn clock; -1 for a failure, 0 for an episode cut at ``--max-turns``), the oracle's mean actions,
and seconds (both policies). No model, no tokens. Needs the ``web`` extra and Debian's chromium +
chromium-driver. The random policy is a little informed: it types a quoted string of the
utterance (or a word of it) into a text field and picks real options of a select.

    python benchmarks/miniwob_baselines.py --episodes 10
"""

from __future__ import annotations

import argparse
import json
import random
import time

from agentic_rl.envs import make
from agentic_rl.envs.web.miniwob import miniwob_task_names
from agentic_rl.envs.web.miniwob_tasks import random_action
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action


def episode(env, seed: int, policy: str, rng: random.Random, max_turns: int) -> dict:
    """Play one episode; return its success, MiniWoB reward, rubric total and action count."""
    obs, _ = env.reset(seed=seed)
    turns, info = [], {}
    for index in range(max_turns):
        if policy == "oracle":
            text = env.oracle_reply()
        else:
            call = random_action(env.utterance, env.page, rng)
            text = f"<tool_call>{json.dumps(call)}</tool_call>"
        calls, errors = parse_tool_calls(text, turn_index=index)
        obs, reward, terminated, truncated, info = env.step(Action(text, calls, errors))
        turns.append(info)
        if terminated or truncated:
            break
    done = info.get("miniwob_done", False)
    raw = info.get("miniwob_raw", 0.0)
    return {
        "success": float(done and raw >= 1.0),
        "reward": info.get("miniwob_reward", 0.0) if done else 0.0,
        "actions": sum(t.get("actions", 0) for t in turns),
        "valid": sum(t.get("tool_calls", 0) - t.get("tool_errors", 0) for t in turns),
    }


def main() -> None:
    """Run the baselines and print the table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=900000)
    parser.add_argument("--max-turns", type=int, default=8)
    args = parser.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    print(
        f"Seeds {seeds.start}..{seeds.stop - 1} ({args.episodes} episodes per task and policy), "
        f"at most {args.max_turns} turns, turn clock (1 s per action).\n"
    )
    print(
        "| task | kind | oracle success | oracle MiniWoB reward | oracle actions | random success "
        "| random MiniWoB reward | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for task in miniwob_task_names():
        env = make(f"miniwob/{task}-v0")
        start = time.monotonic()
        try:
            rows = {
                policy: [episode(env, s, policy, random.Random(s), args.max_turns) for s in seeds]
                for policy in ("oracle", "random")
            }
        finally:
            env.close()

        def mean(policy: str, key: str, rows: dict = rows) -> float:
            return sum(r[key] for r in rows[policy]) / len(seeds)

        print(
            f"| miniwob/{task}-v0 | {env.task.kind} | {mean('oracle', 'success'):.0%} "
            f"| {mean('oracle', 'reward'):.2f} | {mean('oracle', 'actions'):.1f} "
            f"| {mean('random', 'success'):.0%} | {mean('random', 'reward'):.2f} "
            f"| {time.monotonic() - start:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
