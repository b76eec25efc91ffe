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
  the trainer wrote to ``RUN_DIR/vllm-lora/v{v}`` (``POST /v1/load_lora_adapter``, server
  started with ``enable_lora=True``); requests then name ``lora_model_name(v)`` as the model
  (:class:`agentic_rl.trainer.sampling.backends.VLLMBackend`);
- vLLM on GPUs: its native NCCL / CUDA-IPC weight transfer (``/init_weight_transfer_engine``,
  ``/update_weights``) avoids the disk round trip; not usable on CPU, not tested here;
- any other server: restart it on the model a finished run leaves in ``RUN_DIR/final_model``
  (a HF folder).

Then call ``OpenAICompatPolicy.set_policy_version(v)``. Trajectories sampled before the reload
keep their older version; the PPO ratio against the server's logprobs corrects for the lag
(:mod:`agentic_rl.policy.openai_compat`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from agentic_rl.types import Trajectory


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
