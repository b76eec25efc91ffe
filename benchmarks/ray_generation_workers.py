"""Rollout throughput with the RL rollouts in 1 vs 2 Ray generation workers, and in the trainer.

Each way samples the same round (``--tasks`` calculator-v0 tasks x ``--group`` episodes, the
same sampling seed) with the run's sampler (FastPolicy, float32) on the default model (or
``--model``), after one weight sync:

- ``in process``: the unchanged rollout engine in this process (``run_episodes``), as
  ``agentic-rl train`` without ``--num-generation-workers``;
- ``N workers``: :class:`~agentic_rl.rollout.generation_workers.GenerationWorkerPool` with N
  actors of ``--cpus`` CPUs each (torch threads = floor(cpus)).

Prints episodes/s and sampled tokens/s of each, the 2-worker / 1-worker ratio, and the seconds of
one weight sync (put once in the object store, loaded by every actor). On a machine with C cores
expect at most about min(N, C / threads) from N workers; on 2 cores with 1 thread per worker the
ceiling is 2x, less whatever else runs.

Usage: ``python benchmarks/ray_generation_workers.py [--tasks 4] [--group 4] [--model PATH]``
(run alone: ``flock /tmp/agentic-rl-heavy.lock python benchmarks/ray_generation_workers.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

import torch

from agentic_rl.config import ModelConfig
from agentic_rl.envs import make
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.fast import make_policy_from_config
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.rollout.generation_workers import GenerationWorkerPool

ENV = "calculator-v0"


def _rate(trajectories, seconds: float) -> tuple[float, float]:
    tokens = sum(sum(t.loss_mask) for t in trajectories)
    return len(trajectories) / seconds, tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--cpus", type=float, default=1.0, help="CPUs (and threads) per worker")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    try:
        import ray
    except ImportError as exc:
        sys.exit(f"error: ray is not installed ({exc}): pip install -e '.[ray]'")

    model_dir = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    model_cfg = ModelConfig(max_batch=64)
    config = RolloutConfig(max_turns=3, max_new_tokens=args.max_new_tokens)
    seeds = [s for s in range(args.tasks) for _ in range(args.group)]
    groups = [f"g{s}" for s in seeds]
    threads = max(1, int(args.cpus))

    torch.set_num_threads(threads)
    model = load_model(model_dir)
    policy = make_policy_from_config(model, model_cfg, chat.eos_token_id, tokenizer.pad_token_id)
    envs = [make(ENV) for _ in seeds]
    started = time.perf_counter()
    local = run_episodes(policy, chat, envs, seeds, groups, config, sample_seed=0)
    rows = [("in process", *_rate(local, time.perf_counter() - started))]
    for env in envs:
        env.close()
    del policy

    ray.init(num_cpus=max(2, int(2 * args.cpus)), include_dashboard=False, log_to_driver=False)
    syncs = {}
    try:
        for n in (1, 2):
            pool = GenerationWorkerPool(
                n,
                partial(load_model, model_dir),
                tokenizer,
                model_cfg,
                cpus_per_worker=args.cpus,
                num_threads=threads,
            )
            try:
                syncs[n] = pool.sync(model.state_dict(), 0)
                started = time.perf_counter()
                got = pool.rollout(ENV, {}, seeds, groups, config, sample_seed=0)
                rows.append(
                    (f"{n} worker{'s' * (n > 1)}", *_rate(got, time.perf_counter() - started))
                )
            finally:
                pool.shutdown()
    finally:
        ray.shutdown()

    print(f"{len(seeds)} episodes of {ENV}, model {model_dir.name}, {threads} thread(s) each")
    print(f"{'setting':<12} {'episodes/s':>11} {'tokens/s':>9}")
    for name, eps, tps in rows:
        print(f"{name:<12} {eps:>11.2f} {tps:>9.1f}")
    print(f"2 workers / 1 worker: {rows[2][1] / rows[1][1]:.2f}x episodes/s")
    print(
        "weight sync (put once, load in every actor): "
        + ", ".join(f"{n} worker(s) {s:.2f} s" for n, s in syncs.items())
    )


if __name__ == "__main__":
    main()
