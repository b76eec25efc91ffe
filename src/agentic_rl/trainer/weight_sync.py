"""Policy versions and the weight reload path to an inference server.

Versions. The trainer's weights have a version v: 0 at the start, +1 after every optimizer
step. Every trajectory records the version of the policy that sampled it in
``Trajectory.policy_version`` (:func:`stamp_policy_version`; read back with
:func:`policy_version_of`), so staleness ``v_now − v_sampled`` is visible in the store, the
viewer and the metrics. With the in-process HF policy it is always 0 (on-policy); with a
server it is however many steps the server's weights lag behind.

Reload path (no in-place NCCL weight broadcast here). After step v the trainer writes the
weights with :func:`publish_weights` to ``OUT/v{v}`` (a plain HF directory, or a LoRA adapter
directory for a peft model) plus ``policy_version.json``; then the server is pointed at it:

- vLLM, LoRA: ``POST /v1/load_lora_adapter {"lora_name": "policy-v{v}", "lora_path": OUT/v{v}}``
  (server started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``), then
  sample with ``model="policy-v{v}"``;
- SGLang, full weights: ``POST /update_weights_from_disk {"model_path": OUT/v{v}}``;
- any server: restart it on ``OUT/v{v}``.

Then call ``OpenAICompatPolicy.set_policy_version(v)``. Trajectories sampled before the reload
keep their older version; the PPO ratio against the server's logprobs corrects for the lag
(:mod:`agentic_rl.policy.openai_compat`). These server calls are documented, not tested here
(no vLLM/SGLang on the test machine); ``publish_weights`` is.
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
