"""[model] device and precision: validation, resolution, bf16 training on the CPU, checkpoints.

CI has no GPU: what runs here is the device-agnostic part (the CUDA-only tests skip with the
reason). ``benchmarks/gpu_check.py`` runs the recipe on a real GPU.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.policy.device import Placement, resolve_placement
from agentic_rl.trainer.recipe import train, validate
from agentic_rl.trainer.records.checkpoint import latest_checkpoint
from agentic_rl.trainer.records.model_setup import model_from_checkpoint, trainable_model
from agentic_rl.trainer.records.run_dir import MetricsLog
from tests.recipe_settings import TWO_RL_STEPS

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


@pytest.mark.parametrize(
    "item, message",
    [
        ("model.device='gpu'", "model.device must be auto, cpu, cuda or cuda:N"),
        ("model.device='cuda:x'", "model.device must be auto, cpu, cuda or cuda:N"),
        ("model.precision='fp16'", "model.precision must be one of"),
        ("model.sampler_dtype='float16'", "model.sampler_dtype must be one of"),
    ],
)
def test_bad_device_settings_fail_at_load_naming_the_key(item, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [item])


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_missing_gpu_is_a_config_error_before_any_work(device, tiny_model_dir):
    config = load_config(None, [f"model.device='{device}'", f"model.path='{tiny_model_dir}'"])
    with pytest.raises(ConfigError, match=r"model.device = .* CUDA is not available"):
        validate(config)


def test_auto_resolves_to_the_cpu_in_fp32_here_or_cuda_in_bf16_mixed():
    p = resolve_placement()
    if torch.cuda.is_available():
        assert p.device.type == "cuda" and p.precision == "bf16-mixed"
        assert p.sampler_dtype == torch.bfloat16 and p.cuda_graphs
    else:
        assert (p.device, p.precision, p.sampler_dtype) == (
            torch.device("cpu"),
            "fp32",
            torch.float32,
        )
        assert not p.cuda_graphs  # graphs only ever on CUDA
    assert p.describe()["device"] == str(p.device) and p.describe()["device_name"]


@pytest.mark.parametrize(
    "precision, sampler, sampler_dtype, expected",
    [
        ("fp32", "fast", "auto", torch.float32),
        ("bf16-mixed", "fast", "auto", torch.bfloat16),  # the fast sampler keeps a bf16 copy
        ("bf16-mixed", "hf", "auto", torch.float32),  # the HF sampler reads the fp32 weights
        ("bf16", "hf", "auto", torch.bfloat16),  # ... which are bf16 themselves
        ("bf16-mixed", "fast", "float32", torch.float32),  # explicit wins
        ("fp32", "fast", "bfloat16", torch.bfloat16),
    ],
)
def test_sampler_dtype_follows_the_precision(precision, sampler, sampler_dtype, expected):
    p = resolve_placement("cpu", precision, sampler_dtype, fast_sampler=sampler == "fast")
    assert p.sampler_dtype == expected
    assert p.param_dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    assert p.autocast_dtype == (torch.bfloat16 if precision == "bf16-mixed" else None)


def test_trainable_model_takes_the_placement(tiny_model_dir):
    cfg = load_config(None, []).model
    model = trainable_model(tiny_model_dir, cfg, Placement(torch.device("cpu"), "bf16"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model = trainable_model(tiny_model_dir, cfg, Placement(torch.device("cpu"), "bf16-mixed"))
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # fp32 master weights


def _run(tiny_model_dir, tmp_path, *extra):
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"output_dir='{tmp_path}'",
            "model.num_threads=1",
            *TWO_RL_STEPS,
            *extra,
        ],
    )
    return config, train(config)


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "bf16"])
def test_rl_steps_train_in_each_precision_on_the_cpu(tiny_model_dir, tmp_path, precision):
    """Two RL steps (no warm-up, so only RL can move the weights) in each precision on the CPU:
    the RL update happened (finite loss, non-zero gradient in every step, weights moved), the
    sampler/trainer mismatch is logged, and summary.json names the placement (issue 38 item 7:
    the recipe's smoke run alone passes on warm-up changes)."""
    from safetensors.torch import load_file

    # oracle guidance: the random model fails every task, a guided group has a nonzero advantage
    config, run_dir = _run(
        tiny_model_dir, tmp_path, f"model.precision='{precision}'", "sampling.guidance='oracle'"
    )
    rows = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r["phase"] == "rl"]
    assert len(rows) == 2
    for r in rows:
        assert math.isfinite(r["train/loss"]) and r["train/grad_norm"] > 0
        assert 0 <= r["train/mismatch_kl"] < 1 and r["train/logprob_diff"] < 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["placement"]["precision"] == precision
    assert summary["placement"]["device"] == "cpu"
    sampler = "float32" if precision == "fp32" else "bfloat16"  # auto: bf16 beside bf16 training
    assert summary["placement"]["sampler_dtype"] == sampler
    before = load_file(str(tiny_model_dir / "model.safetensors"))["model.embed_tokens.weight"]
    # checkpoints load on any device and in any precision: here into a float32 model
    path = latest_checkpoint(run_dir)
    fp32 = load_config(None, [f"model.path='{tiny_model_dir}'"]).model
    model, _ = model_from_checkpoint(path, fp32, "cpu")
    after = model.get_input_embeddings().weight
    assert after.dtype == torch.float32 and not torch.equal(before, after)
    saved = load_file(str(path / "trainable.safetensors"))["model.embed_tokens.weight"]
    assert saved.device.type == "cpu" and torch.equal(saved.float(), after)


def test_bf16_mixed_logprobs_agree_with_fp32_to_bf16_precision(tiny_model_dir):
    """The update's forward under bf16 autocast scores stored tokens within bf16 rounding of the
    fp32 forward; the LM head runs in float32 under autocast (its output is float32)."""
    from agentic_rl.trainer.learning.scoring import forward_context, pack, score
    from agentic_rl.types import StopReason, Trajectory

    model = trainable_model(tiny_model_dir, load_config(None, []).model)
    ids, mask = tuple(range(5, 45)), tuple([0] * 20 + [1] * 20)
    traj = Trajectory("x-v0", 0, "g", "t", (), (), ids, mask, (0.0,) * 40, StopReason.TERMINATED)
    batch = pack([traj])
    fp32, _ = score(model, batch)
    head_out = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda m, i, o: head_out.append(o.dtype)
    )
    with forward_context(model, "bf16-mixed"):
        mixed, _ = score(model, batch)
    hook.remove()
    assert head_out == [torch.float32] and mixed.dtype == torch.float32
    assert 0 < float((fp32 - mixed).abs().max()) < 0.05


@needs_cuda
def test_cuda_run_places_everything_on_the_gpu(tiny_model_dir, tmp_path):
    config, run_dir = _run(tiny_model_dir, tmp_path, "model.device='cuda'")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["placement"]["device"].startswith("cuda")
    assert summary["placement"]["precision"] == "bf16-mixed"
