"""Episodes/s with envs in 1 vs 2 Ray env workers, on an env whose tool calls take real time.

The env (``python-product``, defined here) asks for a product of two numbers and offers the
sandboxed ``python`` tool (:class:`agentic_rl.tools.sandbox.episode.EpisodeSandbox`: a bubblewrap
sandbox and a warm interpreter per episode; the first call of an episode starts them, which
takes real time). A scripted oracle policy calls ``python`` with ``print(a * b)`` and then
answers, so every episode is 2 turns and 1 sandboxed tool call; generation costs nothing.

Measured in the same run, each over the same seeds:

- ``local``: envs in this process, the unchanged rollout engine (``run_episodes``);
- ``engine, N workers``: the unchanged engine with ``RemoteEnv`` proxies (steps one at a time);
- ``batched, N workers``: ``EnvWorkerPool.reset_many``/``step_many`` (a turn's env steps in flight
  together, what an engine that steps a turn's actions together would get).

Prints a table of episodes/s and the 2-worker / 1-worker ratio of each way.
Usage: ``python benchmarks/ray_env_workers.py [--episodes 16] [--backend bwrap]``
(run alone: ``flock /tmp/agentic-rl-heavy.lock python benchmarks/ray_env_workers.py``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.model_loading import load_tokenizer, resolve_model_dir
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.rollout.env_workers import EnvWorkerPool
from agentic_rl.tools import execute_tool_calls, parse_tool_calls
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_unavailable_reason
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.types import Action, Message, Observation


class PythonProductEnv(Env):
    """Multiply two 3-digit numbers with the sandboxed python tool (one sandbox per episode)."""

    env_id = "python-product-v0"

    def __init__(self, backend: str = "bwrap"):
        self.config = SandboxConfig(backend=backend)
        self.box: EpisodeSandbox | None = None
        self.a = self.b = 0
        self.called = False

    def reset(self, seed=None, options=None):
        self.close()
        rng = random.Random(seed)
        self.a, self.b, self.called = rng.randint(100, 999), rng.randint(100, 999), False
        self.box = EpisodeSandbox(self.config)
        msgs = (
            Message("system", "Use the python tool, then reply <answer>N</answer>."),
            Message("user", f"What is {self.a} * {self.b}?"),
        )
        return Observation(msgs), {}

    def step(self, action: Action):
        if action.tool_calls:
            self.called = True
            results = execute_tool_calls(
                action.tool_calls, action.tool_call_errors, self.box.tools()
            )
            return (
                Observation(tuple(Message("tool", r.content) for r in results)),
                0.0,
                False,
                False,
                {},
            )
        correct = f"<answer>{self.a * self.b}</answer>" in action.text
        return Observation(()), float(correct), True, False, {"correct": correct}

    def oracle_reply(self):
        if not self.called:
            return (
                '<tool_call>{"name": "python", "arguments": {"code": "print('
                f'{self.a:d} * {self.b:d})"}}}}</tool_call>'
            )
        return f"<answer>{self.a * self.b}</answer>"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        return Rubric(
            [
                RewardFunction(
                    "correct",
                    RewardGroup.OUTCOME,
                    lambda t: float(t.turns[-1].info.get("correct", False)),
                )
            ],
            weights,
        )

    def close(self):
        if self.box is not None:
            self.box.close()
            self.box = None


def _engine(chat: ChatFormat, envs: list[Env], seeds: list[int]) -> float:
    policy = ScriptedPolicy(chat, lambda i, _ctx: envs[i].oracle_reply() or "")
    t0 = time.perf_counter()
    trajs = run_episodes(
        policy,
        chat,
        envs,
        seeds,
        [str(s) for s in seeds],
        RolloutConfig(max_turns=3, max_new_tokens=64),
    )
    elapsed = time.perf_counter() - t0
    ok = sum(t.turns[-1].info.get("correct", False) for t in trajs if t.turns)
    if ok != len(seeds):
        raise RuntimeError(f"only {ok}/{len(seeds)} episodes solved: the benchmark env is broken")
    return len(seeds) / elapsed


def _batched(pool: EnvWorkerPool, envs: list[Any], seeds: list[int]) -> float:
    t0 = time.perf_counter()
    for r in pool.reset_many(envs, seeds):
        if isinstance(r, Exception):
            raise r
    done = [False] * len(envs)
    while not all(done):
        live = [i for i in range(len(envs)) if not done[i]]
        replies = pool.get([envs[i].call_async("oracle_reply") for i in live], what="oracle")
        actions = []
        for _i, text in zip(live, replies):
            calls, errors = parse_tool_calls(text, turn_index=0)
            actions.append(Action(text, calls, errors))
        for i, result in zip(live, pool.step_many([envs[i] for i in live], actions)):
            if isinstance(result, Exception):
                raise result
            done[i] = result[2]
    return len(seeds) / (time.perf_counter() - t0)


def _import_ray():
    """The ``ray`` module, or exit with what to install."""
    try:
        import ray
    except ImportError as exc:
        sys.exit(f"error: ray is not installed ({exc}): pip install -e '.[ray]'")
    return ray


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--backend", default="bwrap", choices=["bwrap", "unsafe_local"])
    args = parser.parse_args()
    ray = _import_ray()
    if args.backend == "bwrap" and bwrap_unavailable_reason():
        sys.exit(
            f"error: {bwrap_unavailable_reason()} (--backend unsafe_local runs without the sandbox)"
        )
    chat = ChatFormat(load_tokenizer(resolve_model_dir("default")))
    seeds = list(range(args.episodes))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows: dict[str, float] = {}
    local = [PythonProductEnv(args.backend) for _ in seeds]
    _engine(chat, local[:2], seeds[:2])  # warm-up (imports, first sandbox)
    rows["local (no Ray), engine"] = _engine(chat, local, seeds)
    for env in local:
        env.close()
    for n in (1, 2):
        pool = EnvWorkerPool(n, cpus_per_worker=2 / n)
        warm = [pool.make(PythonProductEnv, backend=args.backend) for _ in range(2 * n)]
        _batched(pool, warm, list(range(2 * n)))  # warm-up: actors import, first sandboxes
        envs = [pool.make(PythonProductEnv, backend=args.backend) for _ in seeds]
        rows[f"engine, {n} worker(s)"] = _engine(chat, envs, seeds)
        rows[f"batched, {n} worker(s)"] = _batched(pool, envs, seeds)
        for env in envs + warm:
            env.close()
        pool.shutdown()
    ray.shutdown()
    print(
        f"\n{args.episodes} episodes of python-product-v0 (1 sandboxed python call each), backend {args.backend}"
    )
    print(f"{'setting':<26} {'episodes/s':>10}")
    for name, rate in rows.items():
        print(f"{name:<26} {rate:>10.2f}")
    print(
        f"ratio 2/1 workers: engine {rows['engine, 2 worker(s)'] / rows['engine, 1 worker(s)']:.2f}x, "
        f"batched {rows['batched, 2 worker(s)'] / rows['batched, 1 worker(s)']:.2f}x"
    )


if __name__ == "__main__":
    main()
