"""What samples a run's RL rollouts: the ``[rollout] backend`` (``agentic-rl train
--rollout-backend local|vllm|openai --base-url URL``).

A :class:`RolloutBackend` is built once in the run's set-up (:func:`make_backend`) and holds

- ``policy``: the :class:`~agentic_rl.policy.base.Policy` the RL rollouts sample from (held-out
  evaluation always uses the run's local policy, so its figures compare across backends);
- ``version``: the policy version (RL steps) of the weights ``policy`` samples with; every
  rollout round's trajectories are stamped with it (``Trajectory.policy_version``,
  :func:`~agentic_rl.trainer.sampling.weight_sync.stamp_policy_version`);
- :meth:`~RolloutBackend.sync` ``(model, version) -> seconds``: after each RL step's optimizer
  steps, push the trainer's new weights to the sampler (logged as ``perf/weight_sync_s``);
- :meth:`~RolloutBackend.close`: release what the backend started (the recipe calls it at the
  end of the run and on any failure).

The three backends:

``local`` (default)
    The in-process sampler of ``model.sampler`` (FastPolicy or HFPolicy), which reads the
    trainer's own parameters: sync does nothing and takes 0 s; the version is always current.
``openai``
    :class:`~agentic_rl.policy.openai_compat.OpenAICompatPolicy` against ``rollout.base_url``
    (any server that returns sampled token ids and logprobs: vLLM, SGLang). The trainer cannot
    push weights into an arbitrary server, so sync does nothing: the server keeps serving its
    weights (version 0, the model it was started with), the trajectories record that version,
    and ``rollout/staleness_mean``/``_max`` grow by one per step. The PPO ratio against the
    server's recorded logprobs corrects the lag (see the OpenAICompatPolicy docstring); the
    longer the lag, the more tokens the clip (or ``loss.tis_cap``/``mis_*``) cuts.
``vllm``
    A vLLM server (:class:`~agentic_rl.policy.vllm_server.VLLMServer`, in its own virtualenv)
    that this backend starts on the run's model directory during set-up, waits for before the
    first RL step, syncs the full weights into after every RL step
    (:func:`agentic_rl.policy.vllm_sync.sync_full_weights`; a LoRA run hot-loads its adapter
    instead) and stops in :meth:`close`. Its log is ``RUN_DIR/vllm-server.log``.

Ray generation workers (``[scale] num_generation_workers = N``, ``agentic-rl train
--num-generation-workers N``) are the ``local`` sampler moved out of the trainer:
:class:`GenerationWorkersBackend` holds a
:class:`~agentic_rl.rollout.generation_workers.GenerationWorkerPool` of N Ray actors, each with
its own copy of the model and its own envs; the RL rollouts of a round run as whole episodes in
the actors (:meth:`GenerationWorkersBackend.run_episodes`), and :meth:`sync` pushes the trainer's
weights to every actor through the object store. Only with ``backend = "local"``, one process
and ``algorithm.max_off_policy_steps = 0`` (:func:`agentic_rl.trainer.parallel.scale_out.check_scale`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentic_rl.errors import ConfigError
from agentic_rl.policy.base import Policy
from agentic_rl.rollout.engine import RolloutConfig
from agentic_rl.trainer.sampling.weight_sync import stamp_policy_version
from agentic_rl.types import Trajectory

__all__ = [
    "GenerationWorkersBackend",
    "OpenAIBackend",
    "RolloutBackend",
    "VLLMBackend",
    "make_backend",
]

log = logging.getLogger(__name__)

#: seconds the first sync waits for a started vLLM server to become healthy
VLLM_READY_TIMEOUT_S = 900.0


class RolloutBackend:
    """The ``local`` backend, and the interface of the others.

    Args:
        policy: the local sampler (it reads the trainer's parameters).

    Attributes:
        name: the ``rollout.backend`` value. policy: what the RL rollouts sample from.
        version: the policy version of the weights ``policy`` samples with.
    """

    name = "local"

    def __init__(self, policy: Policy):
        self.policy = policy
        self.version = 0

    def sync(self, model: Any, version: int) -> float:
        """Make ``policy`` sample with ``model``'s weights, now at ``version``; returns seconds.

        The local sampler already reads ``model``'s parameters: nothing to push, 0 s.
        """
        self.version = int(version)
        return 0.0

    def finish_round(self, trajectories: Sequence[Trajectory]) -> list[Trajectory]:
        """After a round of rollouts: free the sampler's cache and stamp ``version`` on the
        trajectories (a trajectory that has a version keeps it)."""
        clear = getattr(self.policy, "clear_cache", None)
        if clear is not None:
            clear()
        return stamp_policy_version(trajectories, self.version)

    def close(self) -> None:
        """Release what the backend started (nothing for ``local``)."""


class OpenAIBackend(RolloutBackend):
    """``openai``: an OpenAI-compatible server at a URL; weights never synced (see module doc).

    Args:
        policy: an :class:`~agentic_rl.policy.openai_compat.OpenAICompatPolicy`; its
            ``policy_version`` is the version of the weights the server holds.
    """

    name = "openai"

    def __init__(self, policy: Any):
        super().__init__(policy)
        self.version = int(policy.policy_version)

    def sync(self, model: Any, version: int) -> float:
        """Nothing is pushed to an arbitrary server: its version (and the trajectories' lag)
        stays; 0 s."""
        return 0.0

    def finish_round(self, trajectories: Sequence[Trajectory]) -> list[Trajectory]:
        """Mark trajectories whose requests failed as failed (excluded from the update, never a
        silent zero), forget those failures, and stamp the server's version."""
        from agentic_rl.policy.openai_compat import mark_failed_requests

        marked = mark_failed_requests(trajectories, self.policy.failures)
        for t in trajectories:
            self.policy.failures.pop(t.trajectory_id, None)
        return stamp_policy_version(marked, self.version)


class VLLMBackend(OpenAIBackend):
    """``vllm``: a vLLM server this backend started; weights synced after every RL step.

    Full weights are reloaded in place (``policy.vllm_sync.sync_full_weights``); for a LoRA run
    (``lora_dir`` set, server started with ``enable_lora``) the adapter of each version is
    written to ``lora_dir/v{version}`` and hot-loaded (``sync_lora_adapter``), the previous one
    unloaded and deleted, and requests name the new adapter as their model.

    Args:
        server: a started :class:`~agentic_rl.policy.vllm_server.VLLMServer` (healthy or not
            yet: the first :meth:`sync` waits for it).
        policy: the OpenAICompatPolicy on ``server.base_url``.
        lora_dir: where a LoRA run's adapters are written; None for full weights.
    """

    name = "vllm"

    def __init__(self, server: Any, policy: Any, lora_dir: Path | None = None):
        super().__init__(policy)
        self.server = server
        self.lora_dir = lora_dir
        self._ready = False
        self._loaded: int | None = None  # the LoRA version the server holds

    def sync(self, model: Any, version: int) -> float:
        """Wait for the server (first call only), load ``model``'s weights into it and record
        ``version``; returns the seconds of the weight load.

        Raises:
            VLLMServerError: the server did not become healthy, or the weight update failed.
        """
        if not self._ready:
            self.server.wait_ready(VLLM_READY_TIMEOUT_S)
            self._ready = True
        if self.lora_dir is None:
            from agentic_rl.policy.vllm_sync import sync_full_weights

            seconds = float(sync_full_weights(self.server, model, int(version)))
        else:
            seconds = self._sync_adapter(model, int(version))
        self.policy.set_policy_version(int(version))
        self.version = int(version)
        return seconds

    def _sync_adapter(self, model: Any, version: int) -> float:
        """Write and hot-load the LoRA adapter of ``version``; seconds of write + load."""
        import shutil
        import time

        from agentic_rl.policy.vllm_sync import lora_model_name, sync_lora_adapter

        started = time.perf_counter()
        path = self.lora_dir / f"v{version}"
        model.save_pretrained(path)  # a peft model writes its adapter only
        previous = self._loaded if self._loaded != version else None
        sync_lora_adapter(self.server, path, version, unload_previous=previous)
        if previous is not None:
            shutil.rmtree(self.lora_dir / f"v{previous}", ignore_errors=True)
        self._loaded = version
        self.policy.model = lora_model_name(version)
        return time.perf_counter() - started

    def close(self) -> None:
        """Stop the server (its whole process group; idempotent)."""
        self.server.stop()


class GenerationWorkersBackend(RolloutBackend):
    """``local`` sampling in N Ray generation workers (module doc); the trainer's own ``policy``
    stays for evaluation and guidance.

    Args:
        policy: the run's local sampler (held, not used for RL rollouts).
        pool: a started :class:`~agentic_rl.rollout.generation_workers.GenerationWorkerPool`.

    Attributes:
        pool: the workers. sync_bytes: bytes of the latest sync's tensors.
    """

    def __init__(self, policy: Policy, pool: Any):
        super().__init__(policy)
        self.pool = pool
        self._full_sent = False
        self.sync_bytes = 0

    def sync(self, model: Any, version: int) -> float:
        """Push ``model``'s weights to every live worker (put once in Ray's object store) and
        record ``version``; returns the seconds. The first sync sends the whole state dict; later
        ones the parameters that train (all of them, or a LoRA run's adapters).

        Raises:
            GenerationWorkerError: no worker is alive.
        """
        if self._full_sent:
            weights = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
        else:
            weights = {n: t.detach() for n, t in model.state_dict().items()}
        self.sync_bytes = sum(t.numel() * t.element_size() for t in weights.values())
        seconds = self.pool.sync(weights, int(version))
        self._full_sent = True
        self.version = int(version)
        return seconds

    def run_episodes(
        self,
        env_id: str,
        env_kwargs: dict[str, Any],
        seeds: Sequence[int],
        group_ids: Sequence[str],
        rollout: RolloutConfig,
        *,
        sample_seed: int | None = None,
    ) -> list[Trajectory]:
        """One round of RL rollouts in the workers (each builds its own envs); trajectories in
        the order of ``seeds``, those of a worker that failed marked failed.

        Raises:
            GenerationWorkerError: no worker is alive.
        """
        return self.pool.rollout(
            env_id, env_kwargs, seeds, group_ids, rollout, sample_seed=sample_seed
        )

    def close(self) -> None:
        """Kill the workers (idempotent; Ray itself is stopped by whoever started it)."""
        self.pool.shutdown()


def sampling_model(hf_config: Any, model_cfg: Any) -> Any:
    """A fresh model of ``hf_config`` with the run's LoRA adapters if ``model_cfg.lora``: what a
    generation worker samples with (its values are replaced by the first weight sync). Runs in
    the worker (Ray pickles this function by reference)."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentic_rl.trainer.records.model_setup import with_lora

    # float32: the trainer's dtype (policy.model_loading.load_model)
    model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
    return with_lora(model, model_cfg)


def generation_workers_backend(
    scale: Any, model_cfg: Any, model_dir: Path, local: Policy, seed: int
) -> GenerationWorkersBackend:
    """Start ``scale.num_generation_workers`` actors (Ray must be up: ``trainer.scale.scale_out``)
    sampling with copies of the model at ``model_dir`` (its config and tokenizer are shipped to
    them, so worker nodes need no copy of the model directory).

    Raises:
        GenerationWorkerError: an actor failed to start.
    """
    from functools import partial

    from transformers import AutoConfig

    from agentic_rl.policy.model_loading import load_tokenizer
    from agentic_rl.rollout.generation_workers import GenerationWorkerPool

    hf_config = AutoConfig.from_pretrained(model_dir)
    pool = GenerationWorkerPool(
        scale.num_generation_workers,
        partial(sampling_model, hf_config, model_cfg),
        load_tokenizer(model_dir),
        model_cfg,
        seed=seed,
        cpus_per_worker=scale.generation_worker_cpus,
        timeout_s=scale.generation_worker_timeout_s,
        num_threads=model_cfg.num_threads,
    )
    return GenerationWorkersBackend(local, pool)


def _openai_policy(base_url: str, api_key_env: str, served_model: str, eos_token_id: int, cfg):
    """An OpenAICompatPolicy on ``base_url`` (``served_model`` empty: the server's first model)."""
    from agentic_rl.policy.openai_compat import OpenAICompatPolicy, make_client

    api_key = os.environ.get(api_key_env, "") if api_key_env else ""
    client = make_client(base_url, api_key=api_key or "EMPTY", timeout_s=300.0)
    if not served_model:
        try:
            models = client.models.list().data
        except Exception as exc:  # noqa: BLE001 - any client error: the URL is unusable
            raise ConfigError(
                f"rollout.base_url: cannot list the models of {base_url}: {type(exc).__name__}: {exc}"
            ) from exc
        if not models:
            raise ConfigError(f"rollout.base_url: the server at {base_url} serves no model")
        served_model = models[0].id
    return OpenAICompatPolicy(client, served_model, eos_token_id, max_concurrency=cfg.max_batch)


def make_backend(
    rollout: RolloutConfig,
    model_cfg,
    model_dir: Path,
    run_dir: Path,
    local: Policy,
    eos_id: int,
    scale: Any = None,
    seed: int = 0,
) -> RolloutBackend:
    """The run's rollout backend (``rollout.backend``); a ``vllm`` server, or the Ray generation
    workers of ``scale.num_generation_workers`` > 0, are started here.

    Args:
        rollout: ``[rollout]``. model_cfg: ``[model]`` (``max_batch`` = requests in flight).
        model_dir: the run's resolved HF model directory (what a vLLM server loads).
        run_dir: the run directory (the vLLM server's log goes there).
        local: the run's local sampler. eos_id: the end-of-turn token id.
        scale: ``[scale]`` (None: no generation workers). seed: the run's seed.

    Raises:
        ConfigError: an unknown backend, ``openai`` without ``rollout.base_url``, a server that
            cannot be reached or serves no model, or ``api_key_env`` naming an unset variable.
        VLLMServerError: no vLLM virtualenv is found, or the server does not start.
        ImportError: the ``openai`` client is missing (extra ``openai``).
        GenerationWorkerError: a generation worker failed to start.
    """
    if scale is not None and scale.num_generation_workers > 0:
        if rollout.backend != "local":  # check_scale refuses it before any work
            raise ConfigError("scale.num_generation_workers > 0 needs rollout.backend = 'local'")
        return generation_workers_backend(scale, model_cfg, model_dir, local, seed)
    if rollout.api_key_env and rollout.api_key_env not in os.environ:
        raise ConfigError(
            f"rollout.api_key_env: environment variable {rollout.api_key_env!r} is not set"
        )
    if rollout.backend == "local":
        return RolloutBackend(local)
    if rollout.backend == "openai":
        if not rollout.base_url:
            raise ConfigError("rollout.base_url must be set when rollout.backend = 'openai'")
        return OpenAIBackend(
            _openai_policy(rollout.base_url, rollout.api_key_env, "", eos_id, model_cfg)
        )
    if rollout.backend == "vllm":
        from agentic_rl.policy.vllm_server import VLLMServer

        server = VLLMServer(
            model_dir,
            log_path=run_dir / "vllm-server.log",
            enable_lora=model_cfg.lora,
            max_lora_rank=model_cfg.lora_rank,
        ).start()
        try:
            policy = _openai_policy(server.base_url, "", server.model_name, eos_id, model_cfg)
        except BaseException:
            server.stop()
            raise
        return VLLMBackend(server, policy, run_dir / "vllm-lora" if model_cfg.lora else None)
    raise ConfigError(f"rollout.backend: unknown backend {rollout.backend!r}")
