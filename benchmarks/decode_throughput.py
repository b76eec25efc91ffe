"""Rollout decode throughput: agentic-rl's FastPolicy vs plain HF ``generate`` vs a vLLM CPU server,
same run, same prompts.

For batch sizes 1 and 16 (``--batches``), both paths sample ``--new-tokens`` tokens per row at
T = 1 from SmolLM2-135M-Instruct (fp32, the trainer's weights) with the end-of-turn token
disabled, so every row decodes exactly that many tokens. Timed: the whole call, prompt
encoding included (prompts are ~60 tokens, the same for both). Prints tokens/s per path, the
ratio, and the achieved fraction of this CPU's fp32 decode limit at that batch size. Where
oneDNN has bf16 kernels on this CPU (or with ``--bf16``), it also times FastPolicy with a
bfloat16 sampling copy (``model.sampler_dtype = "bfloat16"``) and reports how far its logprobs
are from the float32 trainer's on the tokens it sampled (the mismatch that the PPO importance
ratio then corrects). The fp32 limit:

    limit step time = FLOPs per step / measured matmul peak + weight bytes / measured bandwidth

with FLOPs per step = 2 · params · B (each weight is used once per token; attention over short
contexts is small) and weight bytes = 4 · params read once per step. Peak GFLOP/s (2048² fp32
``mm``) and bandwidth (a 512 MB copy) are measured in the same run.

vLLM (``--vllm compiled|eager|off``; default ``compiled``, the server ``--rollout-backend vllm``
starts): after the in-process paths are timed (never both at once on a small machine), a vLLM
server (``.venv-vllm``, :class:`~agentic_rl.policy.vllm_server.VLLMServer`, float32, same
weights) is started and sent the same prompts as token ids through ``POST /v1/completions`` by
:class:`~agentic_rl.policy.openai_compat.OpenAICompatPolicy` (the rollout path), one request per
row, all rows' requests in flight at once, with ``ignore_eos`` so every row decodes exactly
``--new-tokens`` tokens at T = 1, top-p 1, top-k off. Prefix caching is off (the repeats send the
same prompts; HF and FastPolicy encode them every time). Timed: the whole batch of requests,
HTTP included. The server's worker gets this process's torch thread count, unpinned
(``OMP_NUM_THREADS``, ``VLLM_CPU_OMP_THREADS_BIND=nobind``; vLLM's default on 2 cores pins one
thread and reserves the other core for its scheduler); its start-up time is printed. Without
``.venv-vllm`` the vLLM table says why.

Usage: ``python benchmarks/decode_throughput.py [--batches 1 16] [--new-tokens 64] [--repeats 3]
[--vllm compiled|eager|off]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from agentic_rl.allocator import active_allocator, reexec_with_allocator
from agentic_rl.policy.base import GenerationRequest, SamplingParams
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.fast import FastPolicy
from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir

NO_EOS = -1  # an id never sampled: every row decodes exactly --new-tokens tokens


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine_limits() -> tuple[float, float]:
    """(fp32 matmul peak in FLOP/s, memory copy bandwidth in bytes/s), measured now."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    mm_s = min(_median_time(lambda: torch.mm(a, b), 5) for _ in range(2))
    src = torch.empty(128 * 1024 * 1024, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)
    copy_s = _median_time(lambda: dst.copy_(src), 5)
    return 2 * 2048**3 / mm_s, 2 * src.numel() * 4 / copy_s  # a copy reads and writes


def main() -> None:
    """Run both paths per batch size and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--model", default="default", help="default (SmolLM2), a HF model dir or a .gguf file"
    )
    parser.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the bfloat16 sampler (default: when oneDNN has bf16 kernels here)",
    )
    parser.add_argument(
        "--vllm",
        choices=("compiled", "eager", "off"),
        default="compiled",
        help="also time a vLLM CPU server: compiled (as the trainer starts it), eager "
        "(--enforce-eager, quicker to start) or off",
    )
    args = parser.parse_args()
    reexec_with_allocator()  # as the agentic-rl command runs; both sides share this process and allocator
    use_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported() if args.bf16 is None else args.bf16

    model_dir = resolve_model_dir(args.model)
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    model.eval()
    chat = ChatFormat(tokenizer)
    params = sum(p.numel() for p in model.parameters())
    flops_peak, bandwidth = machine_limits()
    prompts = [
        chat.encode(
            f"<|im_start|>user\nWhat is {17 + 3 * i} times {23 + 7 * i}? Think step by step.<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
        for i in range(max(args.batches))
    ]
    sampling = SamplingParams(temperature=1.0)
    fast = FastPolicy(model, NO_EOS, tokenizer.pad_token_id)
    bf16 = (
        FastPolicy(model, NO_EOS, tokenizer.pad_token_id, dtype=torch.bfloat16)
        if use_bf16
        else None
    )
    rows, mismatch = [], []
    for batch in args.batches:
        ctx = prompts[:batch]
        width = max(len(c) for c in ctx)
        ids = torch.full((batch, width), tokenizer.pad_token_id)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, c in enumerate(ctx):
            ids[i, width - len(c) :] = torch.tensor(c)
            mask[i, width - len(c) :] = 1

        def hf_generate(ids=ids, mask=mask):  # bound now: called in this iteration
            with torch.no_grad():
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )

        requests = [
            GenerationRequest(tuple(c), args.new_tokens, episode_index=i, sample_seed=i)
            for i, c in enumerate(ctx)
        ]

        def fast_generate(requests=requests):
            fast.generate(requests, sampling)

        hf_generate(), fast_generate()  # warm-up (allocations, weight fusion)
        hf_s = _median_time(hf_generate, args.repeats)
        fast_s = _median_time(fast_generate, args.repeats)
        bf16_s = math.nan
        if bf16 is not None:
            gens = bf16.generate(
                requests, sampling
            )  # warm-up, and the tokens whose logprobs are compared
            bf16_s = _median_time(
                lambda requests=requests: bf16.generate(requests, sampling), args.repeats
            )
            mismatch += _logprob_mismatch(model, requests, gens)
        tokens = batch * args.new_tokens
        limit_step = 2 * params * batch / flops_peak + 4 * params / bandwidth
        limit_tps = batch / limit_step
        rows.append(
            (
                batch,
                tokens / hf_s,
                tokens / fast_s,
                hf_s / fast_s,
                tokens / bf16_s,
                hf_s / bf16_s,
                limit_tps,
                tokens / fast_s / limit_tps,
            )
        )

    vllm_rows: dict[int, float] | str = "off"
    if args.vllm != "off":
        vllm_rows = vllm_throughput(model_dir, prompts, args, tokenizer.pad_token_id)

    print(
        f"SmolLM2-135M fp32, {args.new_tokens} new tokens per row, T=1, median of {args.repeats}; "
        f"threads={torch.get_num_threads()}, measured peak {flops_peak / 1e9:.0f} GFLOP/s, "
        f"bandwidth {bandwidth / 1e9:.1f} GB/s; allocator {active_allocator()}"
    )
    print(
        f"{'batch':>5} | {'HF generate tok/s':>17} | {'agentic-rl fp32 tok/s':>21} | {'ratio':>6} | "
        f"{'agentic-rl bf16 tok/s':>21} | {'ratio':>6} | {'fp32 limit tok/s':>16} | {'fp32 of limit':>13}"
    )
    for batch, hf_tps, fast_tps, ratio, bf_tps, bf_ratio, limit_tps, frac in rows:
        print(
            f"{batch:>5} | {hf_tps:>17.1f} | {fast_tps:>21.1f} | {ratio:>5.2f}x | {bf_tps:>21.1f} | "
            f"{bf_ratio:>5.2f}x | {limit_tps:>16.1f} | {frac:>12.0%}"
        )
    _print_vllm(vllm_rows, rows, args)
    if mismatch:
        diffs = torch.tensor(mismatch)
        outside = float(((diffs.exp() - 1).abs() > 0.2).float().mean())
        print(
            f"bf16 sampler vs fp32 trainer, |logprob difference| over {len(mismatch)} sampled tokens: "
            f"mean {diffs.abs().mean():.4f}, p99 {diffs.abs().quantile(0.99):.4f}, max {diffs.abs().max():.4f}; "
            f"importance ratio outside [0.8, 1.2]: {outside:.2%} of tokens"
        )
    elif not use_bf16:
        print("bf16 sampler: not timed (oneDNN has no bf16 kernels on this CPU; --bf16 forces it)")


def vllm_throughput(model_dir, prompts, args, pad_id: int) -> dict[int, float] | str:
    """Tokens/s of a vLLM CPU server per batch size in ``args.batches`` (module docstring), or
    why it could not be timed (no ``.venv-vllm``, a failed start)."""
    from agentic_rl.policy.openai_compat import OpenAICompatPolicy, make_client
    from agentic_rl.policy.vllm_server import VLLMServer, VLLMServerError, vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason:
        return f"not timed: {reason}"
    server = VLLMServer(
        model_dir,
        eager=args.vllm == "eager",
        # the same threads as this process, unpinned ("auto" would pin 1 thread and reserve a core)
        env={
            "OMP_NUM_THREADS": str(torch.get_num_threads()),
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        },
        extra_args=("--no-enable-prefix-caching",),
    )
    try:
        server.start()
        print(f"vLLM server ({args.vllm}) ready after {server.wait_ready(3600):.0f} s", flush=True)
        client = make_client(server.base_url, timeout_s=1800, max_retries=0)
        policy = OpenAICompatPolicy(
            client,
            server.model_name,
            NO_EOS,
            max_concurrency=max(args.batches),
            extra_body={"ignore_eos": True, "stop_token_ids": [], "min_tokens": args.new_tokens},
        )
        sampling, out = SamplingParams(temperature=1.0), {}
        for batch in args.batches:
            requests = [
                GenerationRequest(tuple(c), args.new_tokens, episode_index=i)
                for i, c in enumerate(prompts[:batch])
            ]
            gens = policy.generate(requests, sampling)  # warm-up, and a check of the lengths
            if policy.failures or any(len(g.token_ids) != args.new_tokens for g in gens):
                return f"not timed: bad answers ({policy.failures or [len(g.token_ids) for g in gens]})"
            seconds = _median_time(lambda r=requests: policy.generate(r, sampling), args.repeats)
            out[batch] = batch * args.new_tokens / seconds
        return out
    except VLLMServerError as exc:
        return f"not timed: {str(exc).splitlines()[0]}"
    finally:
        server.stop()


def _print_vllm(vllm_rows, rows, args) -> None:
    """The vLLM table: tokens/s per batch size and its ratio to HF ``generate`` and FastPolicy."""
    if isinstance(vllm_rows, str):
        print(f"vLLM CPU server: {vllm_rows}")
        return
    print(
        f"vLLM CPU server ({args.vllm}, float32, token ids in via /v1/completions, one request "
        f"per row, all in flight):"
    )
    print(
        f"{'batch':>5} | {'vLLM tok/s':>10} | {'vs HF generate':>14} | {'vs agentic-rl fp32':>18}"
    )
    for batch, hf_tps, fast_tps, *_ in rows:
        v = vllm_rows.get(batch, math.nan)
        print(f"{batch:>5} | {v:>10.1f} | {v / hf_tps:>13.2f}x | {v / fast_tps:>17.2f}x")


def _logprob_mismatch(model, requests, gens) -> list[float]:
    """Per sampled token: the float32 model's logprob minus the one the sampler recorded (T = 1)."""
    out = []
    for r, g in zip(requests, gens):
        ids = torch.tensor([list(r.context_ids) + list(g.token_ids)])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].float(), -1)
        n = len(r.context_ids)
        out += [
            logp[n - 1 + k, t].item() - lp for k, (t, lp) in enumerate(zip(g.token_ids, g.logprobs))
        ]
    return out


if __name__ == "__main__":
    main()
