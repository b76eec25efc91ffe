"""One command that checks and measures agentic-rl on one GPU (issue: train on a GPU).

Runs from a source tree without installing the project, on a machine without network::

    PYTHONPATH=src python benchmarks/gpu_check.py [--shape 1.7b|135m] [--model DIR] [--out FILE]
    PYTHONPATH=src python benchmarks/gpu_check.py --device cpu --dry-run     # here, < 1 minute

It needs torch, transformers, peft, accelerate and the project's pure-Python dependencies
(gymnasium, farama-notifications, tomli-w, ...; a missing one is named in one line). The
tokenizer is SmolLM2's (the default model's): ``--prepare DIR`` writes it, and the wheels of
the pure-Python dependencies, into DIR on a machine that has the default model installed, to
carry to the GPU machine (docs/gpu.md says how); ``--tokenizer DIR`` reads it there.

It builds a random-weight model of the given shape (default the 1.7B shape: SmolLM2's config
at hidden 2048, intermediate 8192, 24 layers, 32 heads, 32 KV heads) or takes ``--model DIR``,
then measures, all in the same run:

1. the device's copy bandwidth and bf16 matmul rate (the limits below are computed from them);
2. the default recipe (warm-up on the oracle's demonstrations, then RL steps with oracle
   guidance, so the update trains even on random weights): step time split into rollout and
   update, the update's loss and gradient norm (finite, non-zero), peak GPU memory;
3. the sampler (bf16 weight copy, CUDA graphs) against HF ``generate`` at 16 and 64 rows, and
   as a fraction of the decode limit (weights and KV bytes per decode step over the bandwidth);
4. the update against a plain bf16 forward + backward + AdamW of the same tokens, and its MFU;
5. logprob agreement between the bf16 sampler and the trainer (bf16-mixed and fp32);
6. a checkpoint written on this device and loaded on the CPU.

It prints the figures with the issue's targets (sampler >= 5x HF generate at 64 rows, update
>= 60 % of plain, the RL step's update no slower than its rollout), writes them as JSON
(``--out``), and exits 1 when any part fails (``--strict``: also when a target is missed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

SHAPES = {
    "1.7b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=24,
        num_attention_heads=32,
        num_key_value_heads=32,
    ),
    "135m": {},  # SmolLM2-135M's own config
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
}
#: what the check imports, as (module, pip name); the pure-Python ones travel as wheels
REQUIRED = (
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("peft", "peft"),
    ("accelerate", "accelerate"),
    ("safetensors", "safetensors"),
    ("numpy", "numpy"),
    ("pyarrow", "pyarrow"),
    ("matplotlib", "matplotlib"),
    ("gymnasium", "gymnasium==1.4.0"),
    ("farama_notifications", "farama-notifications"),
    ("tomli_w", "tomli-w==1.2.0"),
)
PURE_PYTHON_WHEELS = ("gymnasium==1.4.0", "farama-notifications==0.0.6", "tomli-w==1.2.0")


def missing_dependencies() -> list[str]:
    """The pip names of the required modules that do not import."""
    missing = []
    for module, pip_name in REQUIRED:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(pip_name)
    return missing


def prepare(out: Path) -> None:
    """Write SmolLM2's tokenizer to ``out/tokenizer`` and the pure-Python wheels to ``out/whl``."""
    import subprocess

    from agentic_rl.policy.model_loading import load_tokenizer, resolve_model_dir

    load_tokenizer(resolve_model_dir("default")).save_pretrained(out / "tokenizer")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(out / "whl")]
        + list(PURE_PYTHON_WHEELS),
        check=True,
    )
    print(f"wrote {out}/tokenizer and {out}/whl; carry {out} to the GPU machine (docs/gpu.md)")


def build_model(tokenizer, shape: str, out: Path, device) -> Path:
    """A random-weight (seed 0) Llama of ``shape`` with SmolLM2's tokenizer, saved in bf16."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from agentic_rl.policy.model_loading import resolve_model_dir

    try:
        base = LlamaConfig.from_pretrained(resolve_model_dir("default")).to_dict()
    except Exception:  # noqa: BLE001 - no default model here: SmolLM2-135M's shape by hand
        base = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30)
        base |= dict(num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0)
    keep = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    dims = {k: base[k] for k in (*keep, "num_key_value_heads") if k in base}
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        **{**dims, **SHAPES[shape]},
        rope_theta=base.get("rope_theta", 100000.0),
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it will run (seconds on a GPU)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def rl_steps(model_dir: Path, device: str, steps: int, dry_run: bool, work: Path) -> dict:
    """The default recipe's warm-up and ``steps`` RL steps on ``device`` (no evaluations or
    checkpoints: those write gigabytes for a 1.7B model and measure nothing here)."""
    import torch

    from agentic_rl.config import load_config
    from agentic_rl.trainer.recipe import prepare_rl, rl_step, warmup
    from agentic_rl.trainer.run import setup

    sets = [f"model.path='{model_dir}'", f"model.device='{device}'", f"output_dir='{work}'"]
    if dry_run:
        sets += ["warmup.num_demos=4", "algorithm.tasks_per_step=2", "algorithm.group_size=2"]
        sets += ["sampling.rollout_tasks=2"]
    config = load_config(None, sets)
    run = setup(config, work / "run")
    try:
        optimizer = prepare_rl(run)
        t0 = time.perf_counter()
        warmup(run, lambda *a: None)
        warmup_s = time.perf_counter() - t0
        run.state.backend.sync(run.model, 0)
        before = [p.detach().clone() for p in list(run.model.parameters())[:3]]
        rows = [rl_step(run, step, optimizer, None) for step in range(steps)]
        moved = any(not torch.equal(b, p) for b, p in zip(before, run.model.parameters()))
    finally:
        run.state.backend.close()
    trained = [r for r in rows if "train/loss" in r]
    if not trained or not moved:
        raise RuntimeError("no RL step trained (no informative group, or the weights did not move)")
    for r in trained:
        if not (r["train/grad_norm"] > 0 and abs(r["train/loss"]) < float("inf")):
            raise RuntimeError(f"RL update not finite and non-zero: {r}")
    out = {
        "placement": run.placement.describe(),
        "warmup_s": warmup_s,
        "steps": [
            {
                k: r.get(k)
                for k in (
                    "perf/rollout_time_s",
                    "perf/update_time_s",
                    "train/loss",
                    "train/grad_norm",
                    "train/logprob_diff",
                    "train/mismatch_kl",
                    "rollout/generated_tokens",
                    "perf/tokens_per_s",
                )
            }
            for r in rows
        ],
    }
    if torch.cuda.is_available() and device != "cpu":
        out["peak_mem_GB"] = torch.cuda.max_memory_allocated() / 1e9
    return out


def checkpoint_round_trip(model_dir: Path, device: str, work: Path) -> dict:
    """Write a checkpoint of a model on ``device`` and load it into a CPU model: equal weights."""
    import torch

    from agentic_rl.config import load_config
    from agentic_rl.policy.device import placement_of
    from agentic_rl.trainer.records.checkpoint import CheckpointProgress, save_checkpoint
    from agentic_rl.trainer.records.model_setup import model_from_checkpoint, trainable_model

    cfg = load_config(None, [f"model.path='{model_dir}'", f"model.device='{device}'"]).model
    model = trainable_model(model_dir, cfg, placement_of(cfg))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    path = save_checkpoint(work, model, optimizer, torch.Generator(), CheckpointProgress(0, [], {}))
    cpu_model, _ = model_from_checkpoint(path, cfg, "cpu")
    same = all(
        torch.equal(a.detach().cpu(), b) for a, b in zip(model.parameters(), cpu_model.parameters())
    )
    if not same:
        raise RuntimeError("a checkpoint written on the device loads different weights on the CPU")
    return {"written_on": str(next(model.parameters()).device), "loaded_on": "cpu", "equal": True}


def targets(results: dict) -> dict[str, dict]:
    """The issue's three targets, each with its measured value and whether it is met."""
    out = {}
    sampler = results.get("sampler", {}).get("64") or {}
    if sampler:
        out["sampler >= 5x HF generate at 64 rows"] = {
            "value": sampler["speedup"],
            "met": sampler["speedup"] >= 5,
        }
    update = results.get("update") or {}
    if update:
        out["update >= 60 % of plain fwd+bwd"] = {
            "value": update["ratio"],
            "met": update["ratio"] >= 0.6,
        }
    steps = [s for s in (results.get("rl") or {}).get("steps", []) if s["perf/update_time_s"]]
    if steps:
        ratio = sum(s["perf/update_time_s"] for s in steps) / sum(
            s["perf/rollout_time_s"] for s in steps
        )
        out["RL update time <= rollout time"] = {"value": ratio, "met": ratio <= 1.0}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1.7b")
    parser.add_argument("--model", help="a HF model directory instead of a random-weight one")
    parser.add_argument("--tokenizer", help="tokenizer directory (default: the default model's)")
    parser.add_argument("--dry-run", action="store_true", help="tiny shape and sizes (CPU check)")
    parser.add_argument("--steps", type=int, default=3, help="RL steps of the recipe part")
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--prepare", metavar="DIR", help="write tokenizer + wheels to DIR, exit")
    args = parser.parse_args(argv)
    missing = missing_dependencies()
    if missing:
        print(f"error: missing Python packages: {' '.join(missing)} (docs/gpu.md: carry wheels)")
        return 2
    if args.prepare:
        prepare(Path(args.prepare))
        return 0
    return run_check(args)


class Parts:
    """The check's parts: each runs once, its figures or its error recorded, the others go on."""

    def __init__(self) -> None:
        self.figures: dict = {}
        self.errors: dict[str, str] = {}

    def run(self, name: str, fn) -> None:
        t0 = time.perf_counter()
        try:
            self.figures[name] = fn()
            print(f"[{name}] {time.perf_counter() - t0:.1f} s: {json.dumps(self.figures[name])}")
        except Exception as exc:  # noqa: BLE001 - a failed part is reported, the others run
            self.errors[name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()


def run_check(args) -> int:
    """Run every part (module docstring); returns the exit status."""
    import torch

    from benchmarks import gpu_measure as measure

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda, but torch sees no GPU (use --device cpu --dry-run here)")
        return 2
    device, dry = torch.device(args.device), args.dry_run
    shape = "tiny" if dry else args.shape
    results: dict = {"device": args.device, "shape": args.model or shape}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
    started, parts = time.perf_counter(), Parts()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        model_dir = _model_dir(args, work, shape, device)
        parts.run("peaks", lambda: measure.device_peaks(device, dry))
        steps = 1 if dry else args.steps
        parts.run("rl", lambda: rl_steps(model_dir, args.device, steps, dry, work))
        _model_parts(parts, model_dir, args.device, dry)
        parts.run("checkpoint", lambda: checkpoint_round_trip(model_dir, args.device, work / "c"))
    results.update(parts.figures)
    results["errors"] = parts.errors
    results["targets"] = targets(results)
    results["seconds"] = time.perf_counter() - started
    Path(args.out).write_text(json.dumps(results, indent=2))
    _print_summary(results, args.out)
    missed = [k for k, v in results["targets"].items() if not v["met"]]
    return 1 if parts.errors or (args.strict and missed) else 0


def _model_parts(parts: Parts, model_dir: Path, device: str, dry: bool) -> None:
    """The sampler, logprob and update parts, on one trainer model (freed on return)."""
    from benchmarks import gpu_measure as measure

    nan = float("nan")
    peaks = parts.figures.get("peaks", {"bandwidth_GBps": nan, "bf16_matmul_TFLOPs": nan})
    model = _trainer_model(model_dir, device)
    rows, prompt, new = ([4, 8], 16, 16) if dry else ([16, 64], 64, 128)
    bandwidth = peaks["bandwidth_GBps"] * 1e9
    parts.run(
        "sampler",
        lambda: measure.sampler_throughput(model, model_dir, rows, prompt, new, bandwidth),
    )
    parts.run("logprobs", lambda: measure.logprob_agreement(model, 8 if dry else 32, prompt, 64))
    count, length, trained = (8, 64, 32) if dry else (32, 512, 256)
    peak = peaks["bf16_matmul_TFLOPs"]
    parts.run(
        "update",
        lambda: measure.update_throughput(model, count, length, trained, 8, peak),
    )


def _model_dir(args, work: Path, shape: str, device) -> Path:
    if args.model:
        return Path(args.model)
    from agentic_rl.policy.model_loading import load_tokenizer, resolve_model_dir

    tok_dir = Path(args.tokenizer) if args.tokenizer else resolve_model_dir("default")
    return build_model(load_tokenizer(tok_dir), shape, work / "model", device)


def _trainer_model(model_dir: Path, device: str):
    from agentic_rl.config import load_config
    from agentic_rl.policy.device import placement_of
    from agentic_rl.trainer.records.model_setup import trainable_model

    cfg = load_config(None, [f"model.path='{model_dir}'", f"model.device='{device}'"]).model
    return trainable_model(model_dir, cfg, placement_of(cfg))


def _print_summary(results: dict, out: str) -> None:
    print(
        f"\n== gpu_check on {results.get('gpu', results['device'])} ({results['shape']}): "
        f"{results['seconds']:.0f} s =="
    )
    for name, t in results["targets"].items():
        print(f"  {'met   ' if t['met'] else 'MISSED'} {name}: {t['value']:.2f}")
    for name, err in results["errors"].items():
        print(f"  FAILED {name}: {err}")
    print(f"figures: {out}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `benchmarks` importable
    sys.exit(main())
