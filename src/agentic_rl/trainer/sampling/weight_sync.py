"""Policy versions and the weight reload path to an inference server.

Versions. The trainer's weights have a version v: 0 at the start, +1 after every optimizer
step. Every trajectory records the version of the policy that sampled it in
``Trajectory.policy_version`` (:func:`stamp_policy_version`; read back with
:func:`policy_version_of`), so staleness ``v_now − v_sampled`` is visible in the store, the
viewer and the metrics. With the in-process HF policy it is always 0 (on-policy); with a
server it is however many steps the server's weights lag behind.

Reload path. After step v the trainer pushes its weights to the inference server:

- vLLM, full weights (tested against a real vLLM CPU server in
  tests/policy/test_vllm_server.py): :func:`agentic_rl.policy.vllm_sync.sync_full_weights`
  writes the state dict as safetensors and has the running engine reload it in place
  (``/collective_rpc reload_weights``, with pause, prefix-cache reset and the engine's own
  weight version); the server is a :class:`agentic_rl.policy.vllm_server.VLLMServer`;
- vLLM, LoRA: :func:`agentic_rl.policy.vllm_sync.sync_lora_adapter` hot-loads the adapter
  that :func:`publish_weights` wrote to ``OUT/v{v}`` (``POST /v1/load_lora_adapter``, server
  started with ``enable_lora=True``); requests then name ``lora_model_name(v)`` as the model
  (implemented to vLLM 0.32's API, not yet exercised by a test);
- vLLM on GPUs: its native NCCL / CUDA-IPC weight transfer (``/init_weight_transfer_engine``,
  ``/update_weights``) avoids the disk round trip; not usable on CPU, not tested here;
- SGLang, full weights: ``POST /update_weights_from_disk {"model_path": OUT/v{v}}`` on a
  directory written by :func:`publish_weights` (documented, not tested here);
- any server: restart it on ``OUT/v{v}``.

Then call ``OpenAICompatPolicy.set_policy_version(v)``. Trajectories sampled before the reload
keep their older version; the PPO ratio against the server's logprobs corrects for the lag
(:mod:`agentic_rl.policy.openai_compat`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentic_rl.types import Trajectory

VERSION_FILE = "policy_version.json"


def stamp_policy_version(trajectories: Sequence[Trajectory], version: int) -> list[Trajectory]:
    """Copies of ``trajectories`` with ``policy_version = version`` (an existing value is kept:
    a backend that knows the version of each rollout, e.g. a lagging server, already set it).

    Raises:
        ValueError: ``version`` < 0.
    """
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    return [
        t if t.policy_version is not None else dataclasses.replace(t, policy_version=int(version))
        for t in trajectories
    ]


def policy_version_of(trajectory: Trajectory) -> int | None:
    """The version of the policy that sampled ``trajectory`` (None if it was never recorded)."""
    return trajectory.policy_version


def staleness(trajectories: Sequence[Trajectory], current_version: int) -> dict[str, float]:
    """Metrics ``rollout/staleness_mean`` and ``rollout/staleness_max`` (in optimizer steps) over
    the trajectories that have a version; empty dict if none has."""
    lags = [current_version - v for t in trajectories if (v := policy_version_of(t)) is not None]
    if not lags:
        return {}
    return {
        "rollout/staleness_mean": sum(lags) / len(lags),
        "rollout/staleness_max": float(max(lags)),
    }


def publish_weights(model: Any, tokenizer: Any, out_dir: str | Path, version: int) -> Path:
    """Write the policy at ``version`` for an inference server to load; returns ``out_dir/v{version}``.

    A peft (LoRA) model writes its adapter only (what vLLM's ``load_lora_adapter`` takes); any
    other model its full weights (safetensors) with the tokenizer. ``policy_version.json``
    records the version. An existing directory for the same version is overwritten.

    Raises:
        ValueError: ``version`` < 0.
        OSError: the directory cannot be written.
    """
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    path = Path(out_dir) / f"v{version}"
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    (path / VERSION_FILE).write_text(json.dumps({"policy_version": int(version)}))
    return path


def read_published_version(path: str | Path) -> int:
    """The version recorded by :func:`publish_weights` in ``path``.

    Raises:
        FileNotFoundError: ``path`` holds no ``policy_version.json``.
    """
    return int(json.loads((Path(path) / VERSION_FILE).read_text())["policy_version"])
