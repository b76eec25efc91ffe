"""AdamW step time on the default model's parameters: the recipe's fused AdamW vs torch's defaults.

The optimizer step is part of every RL step (full fine-tuning updates all ~135 M parameters of
SmolLM2-135M). ``torch.optim.AdamW`` on CPU defaults to the per-tensor loop (``foreach`` is a
CUDA default); ``fused=True`` runs one kernel over every parameter. Both are timed here on the
real model's parameters with random gradients (median of ``--repeats`` steps after one warm
step), with the largest difference between their updated weights after the same steps, and the
ratio printed. TRL's ``GRPOTrainer`` uses ``adamw_torch_fused`` by default (transformers'
``TrainingArguments.optim``), so this is also what a fair GRPO-step comparison needs.

Usage: ``python benchmarks/optimizer_step.py [--repeats 5] [--model default]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from agentic_rl.policy.model_loading import load_model, resolve_model_dir


def _time_steps(
    params: list[torch.nn.Parameter], repeats: int, **kwargs
) -> tuple[float, list[torch.Tensor]]:
    """Median seconds per AdamW step (``kwargs`` select the implementation) and the weights after."""
    params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    gen = torch.Generator().manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    optimizer = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01, **kwargs)
    optimizer.step()  # first step allocates the moments
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), [p.detach() for p in params]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--model", default="default", help="default (SmolLM2), a HF model dir or a .gguf file"
    )
    args = parser.parse_args()
    model = load_model(resolve_model_dir(args.model))
    params = [p for p in model.parameters() if p.requires_grad]
    print(
        f"{sum(p.numel() for p in params) / 1e6:.1f} M parameters in {len(params)} tensors, "
        f"{torch.get_num_threads()} threads"
    )
    base_s, base_w = _time_steps(params, args.repeats)
    rows = [("AdamW default (per-tensor loop)", base_s, 0.0)]
    for label, kwargs in (
        ("AdamW foreach=True", {"foreach": True}),
        ("AdamW fused=True (the recipe's)", {"fused": True}),
    ):
        s, w = _time_steps(params, args.repeats, **kwargs)
        rows.append((label, s, max((a - b).abs().max().item() for a, b in zip(w, base_w))))
    print(f"{'optimizer':<34} {'s/step':>8} {'vs default':>11} {'max |Δw| vs default':>20}")
    for label, s, diff in rows:
        print(f"{label:<34} {s:8.3f} {base_s / s:10.2f}× {diff:20.2e}")


if __name__ == "__main__":
    main()
