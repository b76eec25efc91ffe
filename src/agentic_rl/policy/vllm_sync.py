"""Push the trainer's weights into a running vLLM server (:class:`~.vllm_server.VLLMServer`).

vLLM 0.32's mechanisms for RL weight updates, and which one is used here:

- **Native weight transfer** (``/init_weight_transfer_engine``, ``/start_weight_update``,
  ``/update_weights``, ``/finish_weight_update``; backends ``nccl``, ``ipc``, ``sparse_nccl``,
  ``sharded_rdt``, ``nccl_m2n``): tensors go trainer GPU → engine GPU over NCCL or CUDA IPC.
  The right choice on GPUs (docs/scale_out.md); none of its backends runs on a CPU.
- **In-place reload from disk** (used here, works on CPU and GPU): the trainer writes its
  weights as safetensors, then ``POST /collective_rpc {"method": "reload_weights", "kwargs":
  {"weights_path": DIR}}`` makes every worker load them into the live model
  (``vllm.model_executor.model_loader.reload``), without restarting or recompiling.
  Around it: ``POST /pause?mode=wait`` (in-flight requests finish on the old weights; new ones
  wait), ``POST /reset_prefix_cache`` (KV blocks computed with the old weights are never
  reused), ``POST /update_weight_version`` (the engine records the version; ``GET
  /weight_info`` reads it back), ``POST /resume``. These routes need ``VLLM_SERVER_DEV_MODE=1``,
  which :class:`~.vllm_server.VLLMServer` sets.
- **LoRA hot-load** (:func:`sync_lora_adapter`): ``POST /v1/load_lora_adapter`` with a new
  adapter directory per version (server started with ``enable_lora=True``, which sets
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); requests then name the adapter as their model.

Measured on the 2-core CPU test machine, SmolLM2-135M in float32 (540 MB): see
tests/policy/test_vllm_server.py, which prints the sync time.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from agentic_rl.policy.vllm_server import VLLMServer

log = logging.getLogger(__name__)


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def _sync_root(server: VLLMServer) -> Path:
    root = getattr(server, "sync_dir", None)
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="vllm-sync-"))
        server.sync_dir = root
    return Path(root)


def _write_weights(model: Any, path: Path) -> None:
    """Full weights as one safetensors file plus config.json.

    Tied tensors are written under every name (``lm_head.weight`` too, for a model with
    tied embeddings): vLLM's in-place reload restores the *old* tensors of any layer the
    checkpoint has no weights for (it logs "ParallelLMHead: Failed to load weights"), which
    with tied embeddings puts the old embedding back as the output head. Measured: without
    this the synced engine's logprobs differed from the trainer's by up to 0.99.
    """
    from safetensors.torch import save_file

    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().contiguous()
        if t.data_ptr() in seen:
            t = t.clone()  # safetensors refuses tensors that share memory
        seen.add(t.data_ptr())
        tensors[name] = t
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False) and "lm_head.weight" not in tensors:
        embed = model.get_input_embeddings().weight
        tensors["lm_head.weight"] = embed.detach().contiguous().clone()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    if config is not None:
        config.save_pretrained(path)


def _prune(root: Path, keep: Path) -> None:
    for old in root.glob("v*"):
        if old != keep and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def sync_full_weights(
    server: VLLMServer, model: Any, version: int, *, pause_mode: str = "wait"
) -> float:
    """Load the trainer's current weights into the running engine; returns the seconds taken.

    Writes ``model``'s full weights (safetensors) to ``server.sync_dir/v{version}``, then pauses
    generation, reloads the weights in place from that directory, resets the prefix cache,
    records ``version`` in the engine and resumes (module docstring). The previous version's
    directory is deleted once the engine has loaded the new one.

    Args:
        server: a ready :class:`~.vllm_server.VLLMServer` (dev routes on).
        model: the trainer's HF causal LM (same architecture as the served model); not peft.
        version: the policy version these weights are (optimizer steps taken), >= 0.
        pause_mode: ``"wait"`` (in-flight requests finish on the old weights), ``"keep"``
            (they are frozen and continue on the new weights: partial rollouts) or
            ``"abort"``.

    Raises:
        ValueError: ``version`` < 0, an unknown ``pause_mode``, or a peft model (use
            :func:`sync_lora_adapter`).
        VLLMServerError: the server refused a call or cannot be reached (the message names
            the route and the server's answer).
    """
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    if pause_mode not in ("wait", "keep", "abort"):
        raise ValueError(f"pause_mode must be 'wait', 'keep' or 'abort', got {pause_mode!r}")
    if _is_peft(model):
        raise ValueError("model is a peft (LoRA) model: use sync_lora_adapter instead")
    start = time.perf_counter()
    root = _sync_root(server)
    path = root / f"v{version}"
    _write_weights(model, path)
    written = time.perf_counter()
    server.post(f"/pause?mode={pause_mode}")
    try:
        server.post(
            "/collective_rpc",
            {"method": "reload_weights", "kwargs": {"weights_path": str(path)}},
            timeout_s=600,
        )
        server.post("/reset_prefix_cache")
        server.post("/update_weight_version", {"new_version": str(int(version))})
    finally:
        server.post("/resume")
    _prune(root, keep=path)
    seconds = time.perf_counter() - start
    log.info(
        "vLLM weight sync v%d: %.2f s (write %.2f s, reload %.2f s)",
        version,
        seconds,
        written - start,
        seconds - (written - start),
    )
    return seconds


def lora_model_name(version: int) -> str:
    """The served model name of the LoRA adapter loaded for ``version``."""
    return f"policy-lora-v{int(version)}"


def sync_lora_adapter(
    server: VLLMServer,
    adapter_dir: str | Path,
    version: int,
    *,
    unload_previous: int | None = None,
) -> float:
    """Hot-load the LoRA adapter in ``adapter_dir`` as model :func:`lora_model_name` (version).

    ``adapter_dir`` is what ``peft_model.save_pretrained`` writes (the trainer's
    :class:`~agentic_rl.trainer.sampling.backends.VLLMBackend` writes ``RUN_DIR/vllm-lora/v{version}``);
    each version needs its own directory (vLLM does not invalidate prefix-cache blocks of an
    adapter reloaded from the same path). Requests then pass ``model=lora_model_name(version)``.

    Args:
        server: a ready server started with ``enable_lora=True``.
        adapter_dir: directory with ``adapter_config.json`` and the adapter weights.
        version: the policy version, >= 0.
        unload_previous: a version whose adapter is unloaded after the new one is loaded.

    Returns:
        The seconds the load took.

    Raises:
        ValueError: ``version`` < 0, or ``adapter_dir`` has no ``adapter_config.json``.
        VLLMServerError: the server refused the adapter (e.g. started without LoRA, or the
            rank exceeds ``max_lora_rank``).
    """
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise ValueError(f"not a LoRA adapter directory (no adapter_config.json): {adapter_dir}")
    start = time.perf_counter()
    server.post(
        "/v1/load_lora_adapter",
        {"lora_name": lora_model_name(version), "lora_path": str(adapter_dir.resolve())},
    )
    if unload_previous is not None:
        server.post("/v1/unload_lora_adapter", {"lora_name": lora_model_name(unload_previous)})
    server.post("/update_weight_version", {"new_version": str(int(version))})
    return time.perf_counter() - start
