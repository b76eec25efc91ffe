"""Oracle and random baselines of ``web-shop-v0`` (text browser by default; ``--browser chromium``).

Both policies play the same seeds with at most ``--max-turns`` turns (the recipe's 12), without a
model or tokens: *oracle* is the env's reference policy; *random* is the MiniWoB baseline's
(:func:`agentic_rl.envs.web.miniwob_tasks.random_action`: a random ref of the page and a valid
action for it, typing a word of the task into a text field). Prints a markdown table per policy:
success, mean outcome group, mean total reward (the env's rubric, default group weights), mean
actions, and the fraction of episodes with an unasked payment or cancellation (the risk
components), then the seconds for both. Needs the ``web`` extra.

With ``--model PATH|default`` a model (e.g. the base SmolLM2-135M-Instruct, no training) also
plays the same seeds, greedily, through the rollout engine with the budgets, prompt and rubric of
``agentic-rl train --env web-shop-v0`` (as the trainer's held-out evaluation does), as a third row.

    python benchmarks/web_shop_baselines.py --episodes 20
    python benchmarks/web_shop_baselines.py --episodes 20 --model default
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from agentic_rl.envs import make
from agentic_rl.envs.checker import play_oracle
from agentic_rl.envs.web.miniwob_tasks import random_action
from agentic_rl.errors import EnvUnavailableError


def run(env, seed: int, policy: str, max_turns: int) -> dict[str, float]:
    """One episode of ``policy``; its rubric components and total."""
    rng = random.Random(seed)
    if policy == "random":
        oracle = env.oracle_reply

        def reply() -> str | None:
            if env.episode.done:
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


def model_rows(model: str, seeds: range, browser: str) -> list[dict[str, float]]:
    """Greedy episodes of the model at ``model`` (a path or ``default``) on ``seeds`` with the
    recipe of ``train --env web-shop-v0``; per episode its rubric components and total."""
    from agentic_rl.cli.main import env_overrides
    from agentic_rl.config import load_config
    from agentic_rl.policy.chat import ChatFormat
    from agentic_rl.policy.fast import make_policy
    from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
    from agentic_rl.trainer.evaluation.held_out import evaluate

    model_dir = resolve_model_dir(model)
    tokenizer = load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    policy = make_policy(load_model(model_dir), chat.eos_token_id, tokenizer.pad_token_id)
    config = load_config(None, env_overrides("web-shop-v0", []))
    _, trajectories = evaluate(
        policy,
        chat,
        "web-shop-v0",
        {**config.env.kwargs, "browser": browser},
        list(seeds),
        config.rollout,
        config.reward,
        batch_size=len(seeds),
    )
    return [
        {**t.reward_components, "total": t.reward, "failed": float(t.failed)} for t in trajectories
    ]


def main() -> None:
    """Run the baselines and print the table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=900000)
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--browser", default="text", choices=("text", "chromium"))
    parser.add_argument(
        "--model",
        default=None,
        help="also play a model greedily: a path or 'default' (the base SmolLM2-135M-Instruct)",
    )
    args = parser.parse_args()
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    env = make("web-shop-v0", browser=args.browser)
    start = time.monotonic()
    try:
        rows = {p: [run(env, s, p, args.max_turns) for s in seeds] for p in ("oracle", "random")}
    finally:
        env.close()
    seconds = time.monotonic() - start
    if args.model:
        started = time.monotonic()
        rows[f"model {args.model} (greedy)"] = model_rows(args.model, seeds, args.browser)
        print(f"model: {time.monotonic() - started:.0f} s", flush=True)
    print(
        f"Seeds {seeds.start}..{seeds.stop - 1} ({args.episodes} episodes per policy), at most "
        f"{args.max_turns} turns, browser {args.browser}, {seconds:.0f} s for oracle and random.\n"
    )
    print(
        "| policy | success | outcome | total reward | actions | unasked payment | "
        "unasked cancellation |"
    )
    print("|---|---|---|---|---|---|---|")
    n = len(seeds)
    for policy, results in rows.items():

        def mean(key: str, results: list = results) -> float:
            return sum(r.get(key, 0.0) for r in results) / n

        def share(key: str, results: list = results) -> float:
            return sum(r.get(key, 0.0) > 0 for r in results) / n

        print(
            f"| {policy} | {mean('success'):.0%} | {mean('outcome'):.2f} | {mean('total'):.2f} | "
            f"{mean('actions'):.1f} | {share('extra_payments'):.0%} | "
            f"{share('unasked_cancellations'):.0%} |"
        )


if __name__ == "__main__":
    try:
        main()
    except EnvUnavailableError as exc:  # the web extra or Debian's Chromium is missing
        sys.exit(f"error: {exc}")
