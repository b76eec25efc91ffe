"""How far a bf16 sampler's recorded logprobs are from the trainer's, against PPO's clip range.

The default on a GPU samples from a bf16 weight copy and trains in ``bf16-mixed``
(:mod:`agentic_rl.policy.device`). At unchanged weights the PPO ratio π_θ/μ should be 1; every
token whose ratio the sampler/trainer mismatch alone pushes outside the clip range [0.8, 1.28]
is clipped as if the policy had moved. This script samples calculator-v0 episodes (T = 1, the
RL temperature) with the fast sampler in float32 and in bfloat16, scores the sampled tokens with
the trainer's forward in fp32 and in bf16-mixed, and prints, per (sampler, trainer) pair, in the
same run: mean |Δ logprob|, the k3 estimate of KL(μ‖π) per token, and the fractions of sampled
tokens whose ratio lies outside [0.8, 1.28] and outside [0.5, 2] (the TIS cap of 2, Yao et
al. 2025). The fp32/fp32 row is the float-error floor the others are compared with.

Usage: ``python benchmarks/bf16_mismatch.py [--model default] [--episodes 32] [--seed 0]``.
"""

from __future__ import annotations

import argparse

import torch

from agentic_rl.config import load_config
from agentic_rl.envs import make
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.fast import FastPolicy
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
from agentic_rl.rollout import run_episodes
from agentic_rl.trainer.learning.scoring import forward_context, pack, score


def mismatch_rows(model, chat, episodes: int, seed: int) -> list[dict]:
    """One row per (sampler dtype, trainer precision): the figures of the module docstring."""
    rollout = load_config(None, []).rollout
    rows = []
    for sampler_dtype in (torch.float32, torch.bfloat16):
        policy = FastPolicy(model, chat.eos_token_id, chat.eos_token_id, dtype=sampler_dtype)
        envs = [make("calculator-v0") for _ in range(episodes)]
        seeds = [seed + i for i in range(episodes)]
        trajs = run_episodes(policy, chat, envs, seeds, [f"g{s}" for s in seeds], rollout)
        for env in envs:
            env.close()
        for precision in ("fp32", "bf16-mixed"):
            deltas = []
            for i in range(0, len(trajs), 8):
                batch = pack(trajs[i : i + 8])
                with torch.no_grad(), forward_context(model, precision):
                    trainer, _ = score(model, batch)
                deltas.append(trainer.double() - batch.old_logprobs.double())
            d = torch.cat(deltas).clamp(-20, 20)
            ratio = d.exp()
            rows.append(
                {
                    "sampler": str(sampler_dtype).removeprefix("torch."),
                    "trainer": precision,
                    "tokens": d.numel(),
                    "mean_abs_diff": float(d.abs().mean()),
                    "mismatch_kl": float((torch.expm1(d) - d).mean()),
                    "outside_clip": float(((ratio < 0.8) | (ratio > 1.28)).double().mean()),
                    "outside_tis": float(((ratio < 0.5) | (ratio > 2.0)).double().mean()),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model_dir = resolve_model_dir(args.model)
    model = load_model(model_dir)
    chat = ChatFormat(load_tokenizer(model_dir))
    rows = mismatch_rows(model, chat, args.episodes, args.seed)
    print(
        f"{'sampler':<9} {'trainer':<11} {'tokens':>7} {'mean|Δ|':>9} {'KL(μ‖π)':>10} "
        f"{'ratio∉[.8,1.28]':>16} {'ratio∉[.5,2]':>13}"
    )
    for r in rows:
        print(
            f"{r['sampler']:<9} {r['trainer']:<11} {r['tokens']:>7} {r['mean_abs_diff']:>9.2e} "
            f"{r['mismatch_kl']:>10.2e} {r['outside_clip']:>16.2%} {r['outside_tis']:>13.2%}"
        )
    floor = rows[0]["mean_abs_diff"]
    for r in rows[1:]:
        print(
            f"{r['sampler']}/{r['trainer']}: mean |Δ| {r['mean_abs_diff'] / max(floor, 1e-12):.0f}x "
            "the fp32/fp32 floor"
        )


if __name__ == "__main__":
    main()
