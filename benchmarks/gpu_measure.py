"""The measurements of ``benchmarks/gpu_check.py``, one function per part (imported by it).

Each part returns a dict of figures measured in the calling run. Every comparison is against a
peer or a hardware limit measured in the same run: HF ``generate`` for the sampler, a plain
bf16 forward + backward + AdamW for the update, the copy bandwidth and bf16 matmul rate of this
device for the limits.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

__all__ = [
    "device_peaks",
    "logprob_agreement",
    "sampler_throughput",
    "update_throughput",
]


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeats: int = 3) -> float:
    """Median wall seconds of ``fn`` over ``repeats`` calls, after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def device_peaks(device: torch.device, dry_run: bool) -> dict[str, float]:
    """The device's copy bandwidth (bytes read + written per second) and bf16 matmul rate.

    Returns:
        ``bandwidth_GBps`` and ``bf16_matmul_TFLOPs`` (``n³`` products of random bf16 matrices,
        n = 8192 on a GPU, 512 in a dry run).
    """
    numel = (1 << 20) if dry_run else (1 << 30)  # 2 MB / 2 GB of bf16
    src = torch.empty(numel, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    copy_s = timed(lambda: dst.copy_(src), device, repeats=5)
    n = 512 if dry_run else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    mm_s = timed(lambda: a @ b, device, repeats=5)
    return {
        "bandwidth_GBps": 2 * src.numel() * src.element_size() / copy_s / 1e9,
        "bf16_matmul_TFLOPs": 2 * n**3 / mm_s / 1e12,
    }


def _prompts(vocab: int, rows: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab - 1, (rows, length), generator=g).tolist()


def _kv_bytes_per_token(config, dtype: torch.dtype) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_layer = (
        2 * config.num_key_value_heads * head_dim * torch.tensor([], dtype=dtype).element_size()
    )
    return config.num_hidden_layers * per_layer


def sampler_throughput(
    model, model_dir, rows_list: list[int], prompt_len: int, new_tokens: int, bandwidth_Bps: float
) -> dict[str, dict[str, float]]:
    """The fast sampler (bf16 weight copy, CUDA graphs on a GPU) against HF ``generate`` (a bf16
    copy of the same weights, sampling, every row decoding ``new_tokens``), per row count.

    The decode limit is the time to read, once per decode step, the sampler's weight copy and
    each row's KV cache at the mean context length, at ``bandwidth_Bps``.

    Returns:
        per row count: ``fast_tok_s``, ``hf_tok_s``, ``speedup``, ``limit_tok_s``,
        ``fraction_of_limit``, ``graph_captures``.
    """
    from transformers import AutoModelForCausalLM

    from agentic_rl.policy.base import GenerationRequest, SamplingParams
    from agentic_rl.policy.fast import FastPolicy

    device = next(model.parameters()).device
    graphs = "graphs" if device.type == "cuda" else "eager"
    policy = FastPolicy(
        model, -1, 0, max_batch=max(rows_list), dtype=torch.bfloat16, static_decode=graphs
    )
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device).eval()
    vocab = model.config.vocab_size
    out: dict[str, dict[str, float]] = {}
    for rows in rows_list:
        prompts = _prompts(vocab, rows, prompt_len, seed=rows)
        calls = [0]

        def fast(prompts=prompts, calls=calls) -> None:
            calls[0] += 1  # fresh cache keys: every call encodes its prompts
            reqs = [
                GenerationRequest(tuple(p), new_tokens, cache_key=f"{calls[0]}-{i}", sample_seed=i)
                for i, p in enumerate(prompts)
            ]
            policy.generate(reqs, SamplingParams(temperature=1.0))  # frees the last call's slots

        ids = torch.tensor(prompts, device=device)

        def hf_generate(ids=ids) -> None:
            with torch.no_grad():
                hf.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=True,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    pad_token_id=0,
                )

        fast_s, hf_s = timed(fast, device, repeats=2), timed(hf_generate, device, repeats=2)
        weights = (
            sum(
                lin.weight.numel() * lin.weight.element_size()
                for layer in policy.decoder._linears
                for lin in layer
            )
            + policy.decoder._head.weight.numel() * policy.decoder._head.weight.element_size()
        )
        mean_ctx = prompt_len + new_tokens / 2
        step_bytes = weights + rows * mean_ctx * _kv_bytes_per_token(model.config, torch.bfloat16)
        limit = rows * bandwidth_Bps / step_bytes
        fast_tok_s = rows * new_tokens / fast_s
        out[str(rows)] = {
            "fast_tok_s": fast_tok_s,
            "hf_tok_s": rows * new_tokens / hf_s,
            "speedup": hf_s / fast_s,
            "limit_tok_s": limit,
            "fraction_of_limit": fast_tok_s / limit,
            "graph_captures": float(policy.decoder.static.captures),
        }
    return out


def logprob_agreement(model, rows: int, prompt_len: int, new_tokens: int) -> dict[str, float]:
    """Sample with the bf16 fast sampler, then score the same tokens with the trainer's forward
    in bf16-mixed and in fp32: mean |Δ logprob| and k3 KL(sampler ‖ trainer) per token."""
    from agentic_rl.policy.base import GenerationRequest, SamplingParams
    from agentic_rl.policy.fast import FastPolicy
    from agentic_rl.trainer.learning.scoring import forward_context, pack, score
    from agentic_rl.types import StopReason, Trajectory

    device = next(model.parameters()).device
    graphs = "graphs" if device.type == "cuda" else "eager"
    policy = FastPolicy(model, -1, 0, dtype=torch.bfloat16, static_decode=graphs)
    prompts = _prompts(model.config.vocab_size, rows, prompt_len, seed=99)
    reqs = [GenerationRequest(tuple(p), new_tokens, sample_seed=i) for i, p in enumerate(prompts)]
    gens = policy.generate(reqs, SamplingParams(temperature=1.0))
    trajs = [
        Trajectory(
            "x-v0",
            0,
            "g",
            f"t{i}",
            (),
            (),
            tuple(p) + g.token_ids,
            (0,) * len(p) + (1,) * len(g.token_ids),
            (0.0,) * len(p) + g.logprobs,
            StopReason.TRUNCATED,
        )
        for i, (p, g) in enumerate(zip(prompts, gens))
    ]
    out = {}
    model.eval()
    for precision in ("bf16-mixed", "fp32"):
        diffs, k3s = [], []
        for i in range(0, rows, 8):
            batch = pack(trajs[i : i + 8], device)
            with torch.no_grad(), forward_context(model, precision):
                trainer, _ = score(model, batch)
            d = (trainer.double() - batch.old_logprobs.double()).clamp(-20, 20)
            diffs.append(d.abs())
            k3s.append(torch.expm1(d) - d)
        key = precision.replace("-", "_")
        out[f"{key}_mean_abs_diff"] = float(torch.cat(diffs).mean())
        out[f"{key}_max_abs_diff"] = float(torch.cat(diffs).max())
        out[f"{key}_mismatch_kl"] = float(torch.cat(k3s).mean())
    return out


def _batch(vocab: int, count: int, length: int, trained: int):
    from agentic_rl.types import StopReason, Trajectory

    prompts = _prompts(vocab, count, length, seed=7)
    mask = (0,) * (length - trained) + (1,) * trained
    return [
        Trajectory(
            "x-v0",
            0,
            f"g{i // 8}",
            f"t{i}",
            (),
            (),
            tuple(p),
            mask,
            (-1.0,) * length,
            StopReason.TERMINATED,
        )
        for i, p in enumerate(prompts)
    ]


def update_throughput(
    model, count: int, length: int, trained: int, micro_batch: int, peak_tflops: float
) -> dict[str, float]:
    """One policy-gradient update (:func:`~agentic_rl.trainer.learning.update.policy_gradient_update`,
    bf16-mixed, fused AdamW) against the plain peer on the same rows: ``model(input_ids)``
    under bf16 autocast (full-vocabulary logits), a cross-entropy loss, backward, fused AdamW.

    Returns:
        ``update_tok_s`` and ``plain_tok_s`` (every token of every row per second),
        ``ratio`` (update / plain), ``update_mfu`` and ``plain_mfu`` (6·N·tokens plus attention
        FLOPs over time, against the matmul rate measured in this run), ``peak_mem_GB``.
    """
    from agentic_rl.trainer.learning.update import (
        LossSettings,
        micro_batches,
        policy_gradient_update,
    )

    device = next(model.parameters()).device
    trajs = _batch(model.config.vocab_size, count, length, trained)
    advantages = [1.0 if i % 2 else -1.0 for i in range(count)]
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-7, fused=True)
    settings = LossSettings(micro_batch_size=micro_batch, precision="bf16-mixed")
    model.train()

    def update() -> None:
        policy_gradient_update(model, optimizer, trajs, advantages, settings)

    ids = torch.tensor([list(t.token_ids) for t in trajs], device=device)

    def plain() -> None:
        for idx in micro_batches([length] * count, micro_batch, 0):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = model(input_ids=ids[idx]).logits
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].float().flatten(0, 1), ids[idx][:, 1:].flatten()
            )
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    update_s = timed(update, device, repeats=2)
    plain_s = timed(plain, device, repeats=2)
    tokens = count * length
    cfg = model.config
    n = sum(p.numel() for p in model.parameters()) - cfg.vocab_size * cfg.hidden_size
    flops = 6 * n * tokens + 12 * cfg.num_hidden_layers * cfg.hidden_size * length * tokens
    out = {
        "update_tok_s": tokens / update_s,
        "plain_tok_s": tokens / plain_s,
        "ratio": plain_s / update_s,
        "update_mfu": flops / update_s / (peak_tflops * 1e12),
        "plain_mfu": flops / plain_s / (peak_tflops * 1e12),
    }
    if device.type == "cuda":
        out["peak_mem_GB"] = torch.cuda.max_memory_allocated(device) / 1e9
    return out
