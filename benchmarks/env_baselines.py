"""Baselines of the task envs: a naive policy, the env's oracle, and (optionally) a model, per env.

Every policy plays the same fixed held-out seeds through the normal rollout engine, with the
rollout budgets and rubric that ``agentic-rl train --env ID`` uses (the default recipe plus the
env's own ``recipe_overrides``), so the columns compare like with like:

- naive: answers at once, without tools, with the last number of the task text
  (``<answer>N</answer>``; the last word when the task has no number): what copying a number
  from the question achieves. Envs that need another final action (e.g. ``submit``) get 0.
- oracle: the env's reference policy (:meth:`Env.oracle_reply`).
- model (``--model PATH|default``): greedy decoding of a HF model, e.g. the base SmolLM2.

Success is the rubric's outcome group at 1 (as in training's evaluation). Writes a markdown
table (stdout, and ``--out FILE``) with the command that produced it. Usage::

    python benchmarks/env_baselines.py --episodes 20 --out docs/env_baselines.md
    flock /tmp/agentic-rl-heavy.lock python benchmarks/env_baselines.py --model default --episodes 8 \\
        --out docs/env_baselines_model.md
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agentic_rl.cli.main import env_overrides
from agentic_rl.config import TrainConfig, load_config
from agentic_rl.envs import make
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import run_episodes
from agentic_rl.trainer.evaluation.held_out import evaluate, summarize
from agentic_rl.types import Trajectory

ENV_IDS = [
    "calculator-v0",
    "math-python-v0",
    "code-repair-v0",
    "swe-repo-v0",
    "search-qa-v0",
    "research-report-v0",
    "rg/basic_arithmetic-v0",
    "rg/chain_sum-v0",
    "rg/gsm_symbolic-v0",
    "rg/countdown-v0",
    "coq-proof-v0",
]
SEED_START = 900_000  # held out from training (0...) and warm-up (500000...) seeds
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def naive_reply(task_text: str) -> str:
    """``<answer>`` with the last number of the task text (else its last word). Never raises."""
    numbers = _NUMBER.findall(task_text)
    if numbers:
        return f"<answer>{numbers[-1]}</answer>"
    words = task_text.split()
    return f"<answer>{words[-1] if words else ''}</answer>"


def recipe_config(env_id: str) -> TrainConfig:
    """The config ``agentic-rl train --env env_id`` would run with (budgets, rubric weights, kwargs)."""
    return load_config(None, env_overrides(env_id, []))


def scripted(
    chat: ChatFormat, config: TrainConfig, seeds: list[int], reply: Callable[[object, str], str]
) -> list[Trajectory]:
    """Play ``seeds`` with ``reply(env, task_text)`` through the rollout engine; score with the rubric."""
    envs = [make(config.env.id, **config.env.kwargs) for _ in seeds]
    tasks: dict[int, str] = {}

    def reply_fn(i: int, context: str) -> str:
        tasks.setdefault(i, context)  # the first context holds the task
        return reply(envs[i], tasks[i]) or ""

    trajectories = run_episodes(
        ScriptedPolicy(chat, reply_fn),
        chat,
        envs,
        seeds,
        [f"{config.env.id}-{s}" for s in seeds],
        config.rollout,
    )
    rubric = envs[0].rubric(config.reward)
    for env in envs:
        env.close()
    return [rubric.apply(t) for t in trajectories]


def _user_text(context: str) -> str:
    """The user message of a rendered ChatML context (the task), else the whole context."""
    match = re.search(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", context, re.DOTALL)
    return match.group(1) if match else context


def _cell(trajectories: list[Trajectory]) -> str:
    m = summarize(trajectories, "b")
    return f"{m['b/success']:.0%} (reward {m.get('b/reward_total', float('nan')):.2f})"


def main(argv: list[str] | None = None) -> int:
    """Run the baselines and print (and optionally write) the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--envs", default=",".join(ENV_IDS))
    parser.add_argument(
        "--model",
        default=None,
        help="model path or 'default' (SmolLM2-135M-Instruct); omit to skip",
    )
    parser.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = parser.parse_args(argv)

    model_dir = resolve_model_dir(args.model or "default")
    tokenizer = load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    policy = None
    if args.model:
        from agentic_rl.policy.fast import make_policy

        policy = make_policy(load_model(model_dir), chat.eos_token_id, tokenizer.pad_token_id)
    seeds = list(range(SEED_START, SEED_START + args.episodes))
    command = "python benchmarks/env_baselines.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    lines = [
        f"Success on seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} episodes per env; mean total reward in "
        f"brackets), budgets and rubric of `agentic-rl train --env ID`. Command: `{command}`",
        "",
        "| env | naive (last number, no tools) | oracle |"
        + (" model (greedy) |" if policy else "")
        + " seconds |",
        "|---|---|---|" + ("---|" if policy else "") + "---|",
    ]
    print("\n".join(lines), flush=True)
    for env_id in args.envs.split(","):
        started = time.perf_counter()
        config = recipe_config(env_id)
        naive = scripted(chat, config, seeds, lambda _env, ctx: naive_reply(_user_text(ctx)))
        oracle = scripted(chat, config, seeds, lambda env, _ctx: env.oracle_reply() or "")
        cells = [_cell(naive), _cell(oracle)]
        if policy is not None:
            _, trajectories = evaluate(
                policy,
                chat,
                env_id,
                config.env.kwargs,
                seeds,
                config.rollout,
                config.reward,
                batch_size=64,
            )
            policy.clear_cache()
            cells.append(_cell(trajectories))
        line = f"| {env_id} | " + " | ".join(cells) + f" | {time.perf_counter() - started:.0f} |"
        lines.append(line)
        print(line, flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
