"""Baselines of the text-game envs: random policy, oracle, and (optionally) a model, per game.

Every policy plays the same held-out seeds through the normal rollout engine and is scored by
the env's rubric, so the columns compare like with like:

- random: a uniformly random move in the game's syntax (a random action name for the Gymnasium
  games; e.g. a random ``[r c n]`` for Sudoku), so it also makes illegal moves;
- oracle: the env's reference policy (:meth:`Env.oracle_reply`);
- model (``--model PATH|default``): greedy decoding of a HF model, e.g. the base SmolLM2.

Prints one markdown row per game: win rate, mean valid-action fraction, mean turns, mean game
return (Σ turn_reward). Usage::

    python benchmarks/game_baselines.py [--episodes 20] [--envs frozenlake-v0,taxi-v0]
    flock /tmp/agentic-rl-heavy.lock python benchmarks/game_baselines.py --model default --episodes 8

Envs whose assets are missing (Wordle, Hangman offline; TextWorld without its extra) are listed
as unavailable. TextWorld generates (and caches) one game per seed on first use, ~7 s each.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from agentic_rl.envs import make
from agentic_rl.envs.games import TEXTARENA_IDS, GymTextEnv, TextArenaEnv, TextWorldEnv
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rewards import RewardWeights
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trainer.evaluation.held_out import evaluate

GAME_IDS = [
    "frozenlake-v0",
    "frozenlake-slippery-v0",
    "taxi-v0",
    "cliffwalking-v0",
    *TEXTARENA_IDS.values(),
    "textworld-v0",
]
SEED_START = 900_000  # held out from training (0...) and warm-up (500000...) seeds


def random_move(env: Any, rng: random.Random) -> str:
    """A uniformly random move in the env's action syntax (legal or not)."""
    if isinstance(env, GymTextEnv):
        return f"<action>{rng.choice(env.action_names)}</action>"
    if isinstance(env, TextWorldEnv):
        return f"<action>{rng.choice(env.admissible_commands())}</action>"
    assert isinstance(env, TextArenaEnv)
    game, g = env.game, env._env
    if game == "GuessTheNumber":
        return f"[{rng.randint(g.min_number, g.max_number)}]"
    if game == "TowerOfHanoi":
        return f"[{rng.choice('ABC')} {rng.choice('ABC')}]"
    if game == "Mastermind":
        gs = g.state.game_state
        return (
            "["
            + " ".join(map(str, rng.sample(range(1, gs["num_numbers"] + 1), gs["code_length"])))
            + "]"
        )
    if game == "Minesweeper":
        return f"[{rng.randrange(g.rows)} {rng.randrange(g.cols)}]"
    if game == "Sudoku":
        return f"[{rng.randint(1, 9)} {rng.randint(1, 9)} {rng.randint(1, 9)}]"
    if game == "Countdown":
        n = max(len(g.numbers), 2)
        return f"[{rng.randrange(n)} {rng.randrange(n)} {rng.choice('+-*/')}]"
    raise ValueError(f"no random move for {game}")


def _row(trajectories: list) -> dict[str, float]:
    n = max(len(trajectories), 1)
    comp = [t.reward_components for t in trajectories if not t.failed]
    return {
        "win": sum(c.get("game_won", 0.0) for c in comp) / n,
        "valid": sum(c.get("valid_actions", 0.0) for c in comp) / n,
        "turns": sum(len(t.turns) for t in trajectories) / n,
        "return": sum(c.get("game_return", 0.0) for c in comp) / n,
        "failed": sum(t.failed for t in trajectories) / n,
    }


def scripted(
    chat: ChatFormat,
    env_id: str,
    seeds: list[int],
    rollout: RolloutConfig,
    reply: Callable[[Any, random.Random], str],
) -> dict[str, float]:
    """Play ``seeds`` with a scripted reply function through the rollout engine; score with the rubric."""
    envs = [make(env_id) for _ in seeds]
    # not random.Random(seed): TextArena seeds the game with random.seed(seed), so that stream
    # would replay the game's own draws (e.g. "guess" the secret number on the first try)
    rngs = [random.Random(f"random-policy-{s}") for s in seeds]
    policy = ScriptedPolicy(chat, lambda i, _ctx: reply(envs[i], rngs[i]) or "")
    trajectories = run_episodes(
        policy, chat, envs, seeds, [f"{env_id}-{s}" for s in seeds], rollout
    )
    rubric = envs[0].rubric(RewardWeights())
    for env in envs:
        env.close()
    return _row([rubric.apply(t) for t in trajectories])


def _fmt(row: dict[str, float] | None) -> str:
    if row is None:
        return "–"
    return f"{row['win']:.0%} win, {row['valid']:.0%} valid, {row['turns']:.1f} turns, return {row['return']:.2f}"


def main() -> None:
    """Run the baselines and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--envs", default=",".join(GAME_IDS))
    parser.add_argument(
        "--model",
        default=None,
        help="model path or 'default' (SmolLM2-135M-Instruct); omit to skip",
    )
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()

    model_dir = resolve_model_dir(args.model or "default")
    tokenizer = load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    policy = None
    if args.model:
        import torch

        from agentic_rl.policy.fast import make_policy

        model = load_model(model_dir)
        policy = make_policy(
            model,
            chat.eos_token_id,
            tokenizer.pad_token_id,
            generator=torch.Generator().manual_seed(0),
        )
    seeds = list(range(SEED_START, SEED_START + args.episodes))
    header = "| env | random | oracle |" + (" model |" if policy else "") + " seconds |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for env_id in args.envs.split(","):
        started = time.perf_counter()
        try:
            probe = make(env_id)
        except EnvUnavailableError as exc:
            print(f"| {env_id} | unavailable: {str(exc).split(';')[0]} |")
            continue
        rollout = RolloutConfig(
            max_turns=probe.max_steps, max_new_tokens=args.max_new_tokens, max_total_tokens=6144
        )
        rand = scripted(chat, env_id, seeds, rollout, random_move)
        oracle = scripted(chat, env_id, seeds, rollout, lambda env, _rng: env.oracle_reply() or "")
        cells = [_fmt(rand), _fmt(oracle)]
        if policy is not None:
            _, trajs = evaluate(
                policy, chat, env_id, {}, seeds, rollout, RewardWeights(), batch_size=64
            )
            policy.clear_cache()
            cells.append(_fmt(_row(trajs)))
        print(
            f"| {env_id} | " + " | ".join(cells) + f" | {time.perf_counter() - started:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
