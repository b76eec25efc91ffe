"""The RL update against a plain-torch forward + backward of the same tokens, in the same run.

One GRPO step of the default recipe trains on up to ``tasks_per_step × group_size`` = 32
trajectories of calculator-v0. This script builds such a batch from real token streams (the
env oracle's episodes on all three levels, rendered through the recipe's token-in/token-out
path, with synthetic old logprobs and advantages), then times on the default model:

* ``plain``: what a straightforward trainer does: ``model(input_ids, attention_mask)`` over the
  padded batch (full ``[B, T, V]`` logits), log-softmax, gather, the PPO-clip loss, backward,
  AdamW; micro-batches of the same rows;
* ``agentic-rl``: :func:`agentic_rl.trainer.learning.update.policy_gradient_update` (shared prompt prefix
  encoded once, LM head only at trained positions, logprobs chunked, fused AdamW);
* ``agentic-rl LoRA``: the same with LoRA adapters (rank 16, all linear layers; no weight
  gradients of the frozen base, only of the adapters).

It prints seconds per update (median of ``--repeats`` after one warm step), the ratio to
``plain``, the trained and read tokens, and peak RSS. Heavy: run it alone.

``--distinct D`` makes each group of 8 hold D distinct episodes and copies of them, as the
default run's low-entropy policy samples (2–5 distinct of 8 measured after the warm-up):
agentic-rl trains each distinct row once with its copies' summed loss weight (exact, see
``trainer.update.deduplicate``); the plain trainer reads every row.

Usage: ``python benchmarks/update_step.py [--trajectories 32] [--repeats 3] [--distinct 8]
[--model default]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import resource
import statistics
import time

import torch

from agentic_rl.algorithms import ppo_clip_loss, token_logprobs_from_logits
from agentic_rl.config import ModelConfig
from agentic_rl.envs import make
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trainer.learning.update import LossSettings, micro_batches, policy_gradient_update
from agentic_rl.trainer.records.model_setup import with_lora
from agentic_rl.types import Trajectory


def oracle_batch(chat: ChatFormat, n: int, distinct: int = 8) -> list[Trajectory]:
    """``n`` oracle episodes of calculator-v0 (all levels) in groups of 8 with ``distinct``
    different episodes per group (copies of them fill the group, as a low-entropy policy
    samples), with synthetic old logprobs."""
    seeds = [8 * (i // 8) + (i % 8) % distinct for i in range(n)]
    envs = [make("calculator-v0") for _ in range(n)]
    oracle = ScriptedPolicy(chat, lambda i, _ctx: envs[i].oracle_reply() or "")
    trajs = run_episodes(
        oracle, chat, envs, seeds, [f"g{s // 8}" for s in seeds], RolloutConfig(max_new_tokens=48)
    )
    out = []
    for t in trajs:  # logprobs a function of the seed: copies stay exact copies
        gen = torch.Generator().manual_seed(t.seed)
        logprobs = tuple(float(-torch.rand((), generator=gen)) if m else 0.0 for m in t.loss_mask)
        out.append(dataclasses.replace(t, logprobs=logprobs))
    return out


def plain_update(
    model, optimizer, trajs: list[Trajectory], advantages: list[float], rows: int
) -> None:
    """Full-logits forward + backward + AdamW over the same micro-batches, the textbook way."""
    total = sum(sum(t.loss_mask[1:]) for t in trajs)
    for idx in micro_batches([len(t.token_ids) for t in trajs], rows, 2048):
        width = max(len(trajs[i].token_ids) for i in idx)
        ids = torch.zeros((len(idx), width), dtype=torch.long)
        attn = torch.zeros_like(ids)
        mask = torch.zeros((len(idx), width), dtype=torch.bool)
        old = torch.zeros((len(idx), width))
        adv = torch.zeros((len(idx), width))
        for r, i in enumerate(idx):
            t = trajs[i]
            n = len(t.token_ids)
            ids[r, :n], attn[r, :n] = torch.tensor(t.token_ids), 1
            mask[r, :n] = torch.tensor(t.loss_mask, dtype=torch.bool)
            old[r, :n], adv[r, :n] = torch.tensor(t.logprobs), advantages[i]
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        target = mask[:, 1:]
        logprobs = token_logprobs_from_logits(logits, ids[:, 1:])[target]
        loss, _ = ppo_clip_loss(
            logprobs,
            old[:, 1:][target],
            adv[:, 1:][target],
            torch.full_like(logprobs, 1.0 / total),
            normalizer=1.0,
        )
        loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _time(fn, repeats: int) -> float:
    fn()  # warm: AdamW allocates its moments, allocator settles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument(
        "--distinct",
        type=int,
        default=8,
        help="distinct episodes per group of 8 (measured after the warm-up: 2-5)",
    )
    parser.add_argument(
        "--model", default="default", help="default (SmolLM2), a HF model dir or a .gguf file"
    )
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model)
    chat = ChatFormat(load_tokenizer(model_dir))
    trajs = oracle_batch(chat, args.trajectories, args.distinct)
    advantages = [(-1.0) ** t.seed for t in trajs]
    read = sum(len(t.token_ids) for t in trajs)
    trained = sum(sum(t.loss_mask[1:]) for t in trajs)
    print(
        f"{len(trajs)} trajectories, {read} tokens read, {trained} trained; {torch.get_num_threads()} threads"
    )
    results = []
    settings = LossSettings(micro_batch_size=args.micro_batch_size, micro_batch_tokens=2048)
    for label in ("plain", "agentic-rl", "agentic-rl LoRA"):
        model = load_model(model_dir)
        if label.endswith("LoRA"):
            model = with_lora(model, ModelConfig(lora=True, lora_rank=16, lora_alpha=32))
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-7, fused=True)
        if label == "plain":
            step = functools.partial(
                plain_update, model, optimizer, trajs, advantages, args.micro_batch_size
            )
        else:
            step = functools.partial(
                policy_gradient_update, model, optimizer, trajs, advantages, settings
            )
        seconds = _time(step, args.repeats)
        results.append((label, seconds))
        del model, optimizer, step
    base = results[0][1]
    print(f"{'update':<18} {'s/update':>9} {'vs plain':>9} {'trained tok/s':>14}")
    for label, seconds in results:
        print(f"{label:<18} {seconds:9.2f} {base / seconds:8.2f}× {trained / seconds:14.1f}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")


if __name__ == "__main__":
    main()
