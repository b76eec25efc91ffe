"""Oracle and random baselines of the MiniWoB++ envs (``miniwob/<task>-v0``) in headless Chromium.

For each task of the set: the scripted oracle and a uniformly random policy
(:func:`agentic_rl.envs.web.miniwob_tasks.random_action`: a random ref of the page and a valid
action for it) play the same seeds, at most ``--max-turns`` turns (the recipe's 8). Prints a
markdown table: success (MiniWoB raw reward 1), mean MiniWoB reward (with its time penalty on the
turn clock; -1 for a failure, 0 for an episode cut at ``--max-turns``), the oracle's mean actions,
and seconds (both policies). No model, no tokens. Needs the ``web`` extra and Debian's chromium +
chromium-driver. The random policy is a little informed: it types a quoted string of the
utterance (or a word of it) into a text field and picks real options of a select.

With ``--model PATH|default`` a model (e.g. the base SmolLM2-135M-Instruct, no training) also
plays the same seeds, greedily, through the rollout engine with the budgets, prompt and rubric of
``agentic-rl train --env miniwob/<task>-v0`` (as the trainer's held-out evaluation does), and the
table gains its success, MiniWoB reward and tool calls per episode. ``--tasks`` picks tasks.

    python benchmarks/miniwob_baselines.py --episodes 10
    python benchmarks/miniwob_baselines.py --episodes 10 --model default
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from agentic_rl.envs import make
from agentic_rl.envs.web.miniwob import miniwob_task_names, resolve_miniwob_id
from agentic_rl.envs.web.miniwob_tasks import MINIWOB_TASKS, random_action
from agentic_rl.errors import EnvUnavailableError
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


def load_model_policy(model: str):
    """``(policy, chat)`` for greedy decoding of the model at ``model`` (a path or ``default``)."""
    from agentic_rl.policy.chat import ChatFormat
    from agentic_rl.policy.fast import make_policy
    from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir

    model_dir = resolve_model_dir(model)
    tokenizer = load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    return make_policy(load_model(model_dir), chat.eos_token_id, tokenizer.pad_token_id), chat


def model_episodes(policy, chat, tasks: list[str], seeds: range) -> dict[str, list[dict]]:
    """Greedy episodes of ``policy`` on ``seeds`` of every task, decoded together in one batch,
    with the budgets and rubric of ``train --env miniwob/<task>-v0`` (the same for every task).

    Returns ``{task: [one dict per episode]}``: success (MiniWoB raw reward 1), reward (MiniWoB
    reward, 0 for an episode that did not end), tool calls and generated tokens.
    """
    from agentic_rl.cli.main import env_overrides
    from agentic_rl.config import load_config
    from agentic_rl.rollout import run_episodes

    config = load_config(None, env_overrides(f"miniwob/{tasks[0]}-v0", []))
    jobs = [(task, seed) for task in tasks for seed in seeds]
    envs = [make(f"miniwob/{task}-v0", **config.env.kwargs) for task, _ in jobs]
    try:
        trajectories = run_episodes(
            policy,
            chat,
            envs,
            [seed for _, seed in jobs],
            [f"{task}-{seed}" for task, seed in jobs],
            config.rollout,
            greedy=True,
        )
        trajectories = [env.rubric(config.reward).apply(t) for env, t in zip(envs, trajectories)]
    finally:
        for env in envs:
            env.close()
    policy.clear_cache()
    rows: dict[str, list[dict]] = {task: [] for task in tasks}
    for (task, _), t in zip(jobs, trajectories):
        last = t.turns[-1].info if t.turns else {}
        done = bool(last.get("miniwob_done", False)) and not t.failed
        rows[task].append(
            {
                "success": float(done and last.get("miniwob_raw", 0.0) >= 1.0),
                "reward": float(last.get("miniwob_reward", 0.0)) if done else 0.0,
                "calls": float(len(t.tool_calls)),
                "tokens": float(t.num_generated_tokens),
            }
        )
    return rows


def main() -> None:
    """Run the baselines and print the table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=900000)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument(
        "--tasks", default="", help="comma-separated task names (default: the whole set)"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="also play a model greedily: a path or 'default' (the base SmolLM2-135M-Instruct)",
    )
    parser.add_argument(
        "--model-only",
        action="store_true",
        help="with --model: play only the model (no oracle or random columns)",
    )
    args = parser.parse_args()
    if args.model_only and not args.model:
        parser.error("--model-only needs --model")
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    tasks = [t for t in args.tasks.split(",") if t] or miniwob_task_names()
    for task in tasks:
        resolve_miniwob_id(f"miniwob/{task}-v0")  # an unknown task fails before any work
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    model_rows: dict[str, list[dict]] = {}
    started = time.monotonic()
    if args.model:
        policy, chat = load_model_policy(args.model)
        model_rows = model_episodes(policy, chat, tasks, seeds)
    model_seconds = time.monotonic() - started
    if args.model_only:
        print(
            f"Seeds {seeds.start}..{seeds.stop - 1} ({args.episodes} episodes per task), model "
            f"{args.model}, greedy, budgets of `train --env` (at most 8 turns of 64 tokens), "
            f"turn clock; {model_seconds:.0f} s for all tasks in one batch.\n"
        )
        print("| task | kind | model success | model MiniWoB reward | tool calls | tokens |")
        print("|---|---|---|---|---|---|")
        for task, rows in model_rows.items():

            def avg(key: str, rows: list = rows) -> float:
                return sum(r[key] for r in rows) / len(rows)

            print(
                f"| miniwob/{task}-v0 | {MINIWOB_TASKS[task].kind} | {avg('success'):.0%} "
                f"| {avg('reward'):.2f} | {avg('calls'):.1f} | {avg('tokens'):.0f} |"
            )
        return
    with_model = bool(model_rows)
    print(
        f"Seeds {seeds.start}..{seeds.stop - 1} ({args.episodes} episodes per task and policy), "
        f"at most {args.max_turns} turns, turn clock (1 s per action)"
        + (
            f"; model {args.model}, greedy, budgets of `train --env` ({model_seconds:.0f} s)"
            if args.model
            else ""
        )
        + ".\n"
    )
    model_head = " model success | model MiniWoB reward | model tool calls |" if with_model else ""
    print(
        "| task | kind | oracle success | oracle MiniWoB reward | oracle actions | random success "
        "| random MiniWoB reward |" + model_head + " seconds |"
    )
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if with_model else "") + "---|")
    for task in tasks:
        env = make(f"miniwob/{task}-v0")
        start = time.monotonic()
        try:
            rows = {
                policy: [episode(env, s, policy, random.Random(s), args.max_turns) for s in seeds]
                for policy in ("oracle", "random")
            }
        finally:
            env.close()

        if model_rows:
            rows["model"] = model_rows[task]

        def mean(policy: str, key: str, rows: dict = rows) -> float:
            return sum(r[key] for r in rows[policy]) / len(seeds)

        model_cells = (
            f"| {mean('model', 'success'):.0%} | {mean('model', 'reward'):.2f} "
            f"| {mean('model', 'calls'):.1f} "
            if with_model
            else ""
        )
        print(
            f"| miniwob/{task}-v0 | {env.task.kind} | {mean('oracle', 'success'):.0%} "
            f"| {mean('oracle', 'reward'):.2f} | {mean('oracle', 'actions'):.1f} "
            f"| {mean('random', 'success'):.0%} | {mean('random', 'reward'):.2f} "
            + model_cells
            + f"| {time.monotonic() - start:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    try:
        main()
    except EnvUnavailableError as exc:  # the web extra or Debian's Chromium is missing
        sys.exit(f"error: {exc}")
