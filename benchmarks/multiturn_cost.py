"""The cost of multi-turn: an 8-turn tool episode vs one turn sampling the same tokens vs re-encoding.

Same run, same model (SmolLM2-135M-Instruct, fp32), same batch of ``--episodes`` episodes:

* **8-turn**: the rollout engine with :class:`~agentic_rl.policy.fast.FastPolicy` (KV kept per
  episode across turns, continuous batching, env steps on worker threads). Each turn samples
  exactly ``--tokens-per-turn`` tokens (end-of-turn disabled), then a tool returns a
  ``--tool-tokens``-sized result, for 8 turns.
* **1-turn**: the same engine and policy, one turn of 8 × ``--tokens-per-turn`` tokens
  (the same number of sampled tokens, no tool results).
* **naive 8-turn**: the same 8-turn episodes, but every turn re-encodes the whole history
  (no per-episode KV reuse, turn-synchronous), as a loop over ``generate`` on the chat
  history would.

Prints seconds per batch and the ratios 8-turn / 1-turn (target <= 1.3) and naive / 8-turn.
Usage: ``python benchmarks/multiturn_cost.py [--episodes 16] [--tokens-per-turn 16] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

from agentic_rl.allocator import active_allocator, reexec_with_allocator
from agentic_rl.envs.base import Env
from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.fast import FastPolicy
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.types import Action, Message, Observation

NO_EOS = -1


class ToolEchoEnv(Env):
    """A tool env with fixed-size results: every turn gets ``tool_words`` words back, then
    the episode terminates after ``turns`` turns. Deterministic; no reward."""

    env_id = "bench-tool-echo"

    def __init__(self, turns: int, tool_words: int) -> None:
        self.turns, self.tool_words, self.t = turns, tool_words, 0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        return Observation(
            (
                Message("system", "You are a helpful assistant with a lookup tool."),
                Message("user", f"Task {seed}: look things up and report."),
            )
        ), {}

    def step(self, action: Action):
        self.t += 1
        result = " ".join(f"v{(self.t * 7 + i) % 97}" for i in range(self.tool_words))
        return Observation((Message("tool", result),)), 0.0, self.t >= self.turns, False, {}

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        return Rubric([], weights)


class Naive:
    """Hides the stream and the cache keys: every turn re-encodes the whole history."""

    def __init__(self, inner: FastPolicy) -> None:
        self.inner = inner

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        bare = [
            GenerationRequest(r.context_ids, r.max_new_tokens, r.episode_index, None, r.sample_seed)
            for r in requests
        ]
        return self.inner.generate(bare, sampling)


def main() -> None:
    """Run the three schedules and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tokens-per-turn", type=int, default=16)
    parser.add_argument("--tool-words", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--model", default="default", help="default (SmolLM2), a HF model dir or a .gguf file"
    )
    args = parser.parse_args()
    reexec_with_allocator()  # as the agentic-rl command runs; both sides share this process and allocator

    model_dir = resolve_model_dir(args.model)
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    fast = FastPolicy(model, NO_EOS, tokenizer.pad_token_id)
    seeds = list(range(args.episodes))
    multi = RolloutConfig(
        max_turns=args.turns, max_new_tokens=args.tokens_per_turn, max_total_tokens=8192
    )
    single = RolloutConfig(
        max_turns=1, max_new_tokens=args.turns * args.tokens_per_turn, max_total_tokens=8192
    )

    def run(policy, cfg: RolloutConfig) -> tuple[float, int, int]:
        envs = [ToolEchoEnv(cfg.max_turns, args.tool_words) for _ in seeds]
        start = time.perf_counter()
        trajs = run_episodes(policy, chat, envs, seeds, [str(s) for s in seeds], cfg, sample_seed=7)
        seconds = time.perf_counter() - start
        fast.clear_cache()
        return (
            seconds,
            sum(t.num_generated_tokens for t in trajs),
            sum(len(t.token_ids) for t in trajs),
        )

    schedules = {
        "8-turn (agentic-rl)": (fast, multi),
        "1-turn, same sampled tokens": (fast, single),
        "8-turn, naive re-encode": (Naive(fast), multi),
    }
    for policy, cfg in schedules.values():
        run(policy, cfg)  # warm-up
    results = {}
    for name, (policy, cfg) in schedules.items():
        runs = [run(policy, cfg) for _ in range(args.repeats)]
        results[name] = (statistics.median(r[0] for r in runs), runs[0][1], runs[0][2])

    base = results["8-turn (agentic-rl)"][0]
    one = results["1-turn, same sampled tokens"][0]
    print(
        f"{args.episodes} episodes, {args.turns} turns x {args.tokens_per_turn} sampled tokens, "
        f"{args.tool_words}-word tool results; median of {args.repeats}; allocator {active_allocator()}"
    )
    print(f"{'schedule':<30} | {'seconds':>8} | {'sampled':>7} | {'stream':>7} | {'vs 8-turn':>9}")
    for name, (seconds, sampled, stream) in results.items():
        print(
            f"{name:<30} | {seconds:>8.2f} | {sampled:>7} | {stream:>7} | {seconds / base:>8.2f}x"
        )
    print(
        f"multi-turn cost: 8-turn / 1-turn = {base / one:.2f}x (target <= 1.3); "
        f"naive / 8-turn = {results['8-turn, naive re-encode'][0] / base:.2f}x"
    )


if __name__ == "__main__":
    main()
