"""A training run's state and its set-up: what the recipe (:mod:`agentic_rl.trainer.recipe`) holds.

:func:`validate` checks what a config names before any work; :func:`setup` loads the model
(:mod:`agentic_rl.trainer.records.model_setup`), the sampling policy and the run's logs into a typed
:class:`Run`. The env constructor arguments (:func:`env_kwargs`, :func:`permission_kwargs`),
the trajectory store (:func:`store`), the RL task pool (:func:`make_task_pool`) and the loss
settings of the policy-gradient steps (:func:`loss_settings`) are read off the run here.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from agentic_rl.config import TrainConfig, WarmupConfig
from agentic_rl.envs import EnvContext, make
from agentic_rl.envs.registry import reset_level
from agentic_rl.errors import ConfigError
from agentic_rl.policy.base import Policy
from agentic_rl.policy.chat_template import AnyChatFormat as ChatFormat
from agentic_rl.policy.chat_template import chat_for_model
from agentic_rl.policy.device import Placement, placement_of
from agentic_rl.policy.fast import make_policy_from_config
from agentic_rl.policy.model_loading import load_tokenizer, resolve_model_dir
from agentic_rl.tools.mcp import McpServerError
from agentic_rl.tools.sandbox import limits as sandbox_limits
from agentic_rl.tools.sandbox.bwrap import SandboxUnavailableError
from agentic_rl.trainer.learning.credit import ALGORITHMS
from agentic_rl.trainer.learning.critic import Critic
from agentic_rl.trainer.learning.update import LossSettings
from agentic_rl.trainer.parallel.ranks import Ranks
from agentic_rl.trainer.parallel.scale_out import (
    NullMetricsLog,
    ScaleOut,
    check_scale,
    launched_world_size,
)
from agentic_rl.trainer.records.model_setup import trainable_model
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trainer.records.tracking import run_metrics_log
from agentic_rl.trainer.sampling.backends import RolloutBackend, make_backend
from agentic_rl.trainer.sampling.task_pool import TaskPool, TaskSource
from agentic_rl.trajectories import RUN_STORE_DIRNAME, TrajectoryStore, trajectory_to_record
from agentic_rl.types import Trajectory

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


__all__ = [
    "Run",
    "TrainerState",
    "env_kwargs",
    "loss_settings",
    "make_task_pool",
    "permission_kwargs",
    "replay_kwargs",
    "setup",
    "store",
    "validate",
]


class AgentHandle(Protocol):
    """What the recipe calls on an ``[agent]`` run's session
    (:class:`~agentic_rl.trainer.sampling.agent_rollouts.AgentSession`; typed here by what is
    used, so this module imports no rollout code)."""

    def metrics(self, batch: Any) -> dict[str, float]:
        """The agent's rollout metrics of one sampled batch."""
        ...

    def close(self) -> None:
        """Stop the policy server and the agent runner."""
        ...


@dataclass
class TrainerState:
    """What changes while a run trains (the one mutable part of a :class:`Run`).

    Attributes:
        backend: what samples the RL rollouts (``rollout.backend``,
            :mod:`agentic_rl.trainer.sampling.backends`); async training swaps in its own
            sampler (:func:`~agentic_rl.trainer.sampling.async_producer.rollout_source`).
        agent: the policy server and agent runner of an ``[agent]`` run
            (:class:`~agentic_rl.trainer.sampling.agent_rollouts.AgentSession`, started by the
            recipe); None for an env run.
        evals: the eval rows so far. timings: seconds per phase (``summary.json``).
    """

    backend: RolloutBackend | None = None
    agent: AgentHandle | None = None
    evals: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    """Everything one training run is, built once by :func:`setup` and then only read.

    What changes during training (the rollout backend, the agent session, eval rows, timings)
    lives in :attr:`state`; the model's weights change in place under the optimizer.

    Attributes:
        config: the resolved config. run_dir: the run directory.
        model: the trainable HF causal LM (a peft model with LoRA).
        tokenizer: its tokenizer. chat: its chat template.
        policy: the rollout sampler over ``model`` (``model.sampler``: FastPolicy or HFPolicy).
        sampler: the generator of the sampler's random draws (checkpointed).
        metrics: ``RUN_DIR/metrics.jsonl`` (and trackers) on rank 0; writes nothing elsewhere.
        store: the run's trajectory store on rank 0; None elsewhere.
        scale: where the envs live (:class:`~agentic_rl.trainer.parallel.scale_out.ScaleOut`)
            and the rank.
        critic: PPO's critic (:class:`~agentic_rl.trainer.learning.critic.Critic`); None for
            critic-free methods.
        task_pool: where RL task seeds come from; None for ``task_sampling = "sequential"``; a
            mixture run's :class:`~agentic_rl.trainer.sampling.mixture.MixturePool` (always set).
        placement: the resolved device and precision (:mod:`agentic_rl.policy.device`).
        loss: the settings of the run's policy-gradient steps, built once from the config's
            ``[loss]``, ``[optim]`` and ``[rollout]`` sections (:func:`loss_settings`).
        state: what changes while it trains (:class:`TrainerState`); a local
            :class:`~agentic_rl.trainer.sampling.backends.RolloutBackend` over ``policy`` when
            no backend is given.
    """

    config: TrainConfig
    run_dir: Path
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    chat: ChatFormat
    policy: Policy
    sampler: torch.Generator
    metrics: MetricsLog | NullMetricsLog
    store: TrajectoryStore | None
    scale: ScaleOut = field(default_factory=ScaleOut)
    critic: Critic | None = None
    task_pool: TaskSource | None = None
    placement: Placement = field(default_factory=lambda: Placement(torch.device("cpu")))
    loss: LossSettings | None = None
    state: TrainerState = field(default_factory=TrainerState)

    def __post_init__(self) -> None:
        if self.loss is None:  # frozen: set once, here
            object.__setattr__(self, "loss", loss_settings(self.config, self.placement.precision))
        if self.state.backend is None:
            self.state.backend = RolloutBackend(self.policy)

    @property
    def ranks(self) -> Ranks:
        """This process's data-parallel ranks (collectives that do nothing on one process)."""
        return Ranks(self.scale.ctx)


def validate(config: TrainConfig) -> Path:
    """Check what the config names before any work: env id and kwargs, model path.

    Returns:
        the resolved model directory.

    Raises:
        UnknownEnvError: ``env.id`` is not registered.
        ConfigError: the env rejects ``env.kwargs``, ``warmup.env_kwargs`` or
            ``[tools.permissions]`` (e.g. a rule for a tool it does not have; in a mixture each
            ``env.mix`` entry's env and kwargs are checked alike), or one of its MCP
            servers cannot start; ``[scale]`` names an unreachable Ray cluster (see
            :func:`~agentic_rl.trainer.parallel.scale_out.check_scale`); a
            server rollout backend or async training under torchrun; ``model.device`` names a
            CUDA device this machine does not have; ``tools.require_whole_sandbox_limits`` on a
            host that cannot bound a sandbox as a whole (otherwise it is switched on here for
            every sandbox of this process and its children).
        ModelNotFoundError: ``model.path`` does not exist.
    """
    placement_of(config.model)  # a missing GPU fails here, before any work
    if config.tools.require_whole_sandbox_limits:  # from now on, for every sandbox of the run
        try:
            sandbox_limits.require_whole_limits_from_now_on()
        except SandboxUnavailableError as exc:
            raise ConfigError(f"tools.require_whole_sandbox_limits = true, but {exc}") from None
    if config.env.mix:  # each env of a mixture with its kwargs and its warm-up's
        from agentic_rl.trainer.sampling.mixture import check_slots

        check_slots(config)
    else:
        _check_env_kwargs(config)
    if config.algorithm.name not in ALGORITHMS:
        raise ConfigError(
            f"algorithm.name: unknown algorithm {config.algorithm.name!r}; "
            f"known: {', '.join(sorted(ALGORITHMS))}"
        )
    check_scale(config)
    if config.rollout.backend != "local" and launched_world_size() > 1:
        raise ConfigError(
            f"rollout.backend = {config.rollout.backend!r} is not supported under torchrun yet "
            "(each rank would sample from its own server); use backend 'local'"
        )
    if config.algorithm.max_off_policy_steps and launched_world_size() > 1:
        raise ConfigError("algorithm.max_off_policy_steps >= 1 is not supported under torchrun yet")
    from agentic_rl.trainer.sampling.agent_rollouts import check_agent  # it imports this module

    check_agent(config)  # [agent]: the function importable, its task files readable
    return resolve_model_dir(config.model.path)


def _check_env_kwargs(config: TrainConfig) -> None:
    """Build the env with the run's kwargs and with the warm-up's (then close it); see
    :func:`validate` for what it raises."""
    base = {**permission_kwargs(config), **config.env.kwargs}
    for section, kwargs in (
        ("env.kwargs", base),
        ("warmup.env_kwargs", {**base, **config.warmup.env_kwargs}),
    ):
        try:
            make(config.env.id, **kwargs).close()
        except (TypeError, ValueError) as exc:
            message = str(exc)
            if message.startswith("tools.permissions"):  # the permission table's key is named
                raise ConfigError(f"{message} (env {config.env.id})") from None
            hint = ""
            if section == "warmup.env_kwargs" and config.warmup.env_kwargs == _CALCULATOR_WARMUP:
                hint = (
                    f" (warmup.env_kwargs = {_CALCULATOR_WARMUP} is calculator-v0's warm-up "
                    "level: set warmup.env_kwargs={} or drop the key, or choose the env with "
                    "--env ID, which takes the env's own recipe defaults)"
                )
            raise ConfigError(f"{section} rejected by {config.env.id}: {message}{hint}") from None
        except McpServerError as exc:
            raise ConfigError(f"env.kwargs.mcp_servers: {exc}") from None


#: the built-in ``warmup.env_kwargs``: calculator-v0's easiest level
_CALCULATOR_WARMUP = WarmupConfig().env_kwargs


def setup(config: TrainConfig, run_dir: Path, scale: ScaleOut | None = None) -> Run:
    """Load the model (LoRA and gradient checkpointing as configured), open the run's logs
    (on rank 0 only; under torchrun the other ranks take rank 0's initial weights) and build the
    critic (PPO) and the task pool, and the rollout backend last (a ``vllm`` server starts here;
    the caller must ``run.state.backend.close()``).

    Raises:
        UnknownEnvError: ``env.id`` is not registered (checked before the model loads).
        ModelNotFoundError: ``model.path`` does not exist.
        ConfigError, VLLMServerError: the rollout backend cannot be built
            (:func:`~agentic_rl.trainer.sampling.backends.make_backend`).
    """
    model_dir = validate(config)
    if config.model.num_threads:
        torch.set_num_threads(config.model.num_threads)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    tokenizer = load_tokenizer(model_dir)
    placement = placement_of(config.model)
    model = trainable_model(model_dir, config.model, placement)
    scale = scale or ScaleOut()
    ranks = Ranks(scale.ctx)
    ranks.broadcast_parameters(model)
    chat = chat_for_model(tokenizer, config.model)
    sampler = torch.Generator().manual_seed(config.seed)
    policy = make_policy_from_config(
        model, config.model, chat.eos_token_id, tokenizer.pad_token_id, generator=sampler
    )
    metrics = ranks.metrics_log(
        lambda: run_metrics_log(run_dir, config.tracking, config=dataclasses.asdict(config))
    )
    trajectories = TrajectoryStore(run_dir / RUN_STORE_DIRNAME) if ranks.is_main else None
    run = Run(
        config, run_dir, model, tokenizer, chat, policy, sampler, metrics, trajectories, scale,
        placement=placement,
    )  # fmt: skip
    # the RL phase's parts read the run: PPO's value head, where task seeds come from
    run = dataclasses.replace(run, critic=make_critic(run), task_pool=make_task_pool(run))
    run.state.backend = make_backend(  # last: a vllm server starts here
        config.rollout,
        config.model,
        model_dir,
        run_dir,
        policy,
        chat.eos_token_id,
        scale=config.scale,
        seed=config.seed,
    )
    return run


def permission_kwargs(config: TrainConfig) -> dict[str, Any]:
    """``{"permissions": <[tools.permissions] table>}`` when that table is set, else ``{}``
    (:func:`~agentic_rl.envs.make` puts it into the env's
    :class:`~agentic_rl.envs.EnvContext`; an env that can take it in neither way is a
    TypeError there, a ConfigError of :func:`validate`). Never raises."""
    return {"permissions": config.tools.permissions} if config.tools.permissions else {}


def run_context(run_dir: Path) -> EnvContext:
    """The :class:`~agentic_rl.envs.EnvContext` of a run's envs: the run's audit log
    (``RUN_DIR/audit.jsonl``) and its id (the run directory's name). Never raises."""
    return EnvContext(audit_path=str(run_dir / "audit.jsonl"), run_id=run_dir.name)


def env_kwargs(run: Run, **extra: Any) -> dict[str, Any]:
    """Constructor arguments of the run's envs: ``[tools.permissions]`` (as ``permissions``),
    ``env.kwargs``, ``extra``, and the run's ``context`` (:func:`run_context`; an env whose
    factory takes no ``context`` is built without it)."""
    kwargs = {**permission_kwargs(run.config), **run.config.env.kwargs, **extra}
    return {**kwargs, "context": run_context(run.run_dir)}


def replay_kwargs(run: Run, **extra: Any) -> dict[str, Any]:
    """The env kwargs stored with each trajectory so replay can rebuild its env (no audit path)."""
    kwargs = env_kwargs(run, **extra)
    return {k: v for k, v in kwargs.items() if k not in ("audit_path", "run_id", "context")}


def store(
    run: Run, trajectories: list[Trajectory], env_extra: dict[str, Any] | None = None, **extra: Any
) -> None:
    """Append one batch (one Parquet shard) with the run id and the env kwargs replay needs."""
    if run.store is None:  # ranks > 0 write nothing
        return
    kwargs = replay_kwargs(run, **(env_extra or {}))
    run.store.append(
        [
            trajectory_to_record(t, run_id=run.run_dir.name, env_kwargs=kwargs, **extra)
            for t in trajectories
        ]
    )


def make_task_pool(run: Run) -> TaskSource | None:
    """The run's task pool: a :class:`TaskPool`, None for ``task_sampling = "sequential"``, a
    mixture's :class:`~agentic_rl.trainer.sampling.mixture.MixturePool`; a candidate's level is read from a
    fresh env's reset info (:func:`~agentic_rl.envs.registry.reset_level`); an env without levels is
    probed once."""
    cfg = run.config
    if cfg.env.mix:  # a mixture draws (env, seed) tasks: agentic_rl.trainer.sampling.mixture
        from agentic_rl.trainer.sampling.mixture import make_mixture_pool

        return make_mixture_pool(run)
    if cfg.sampling.task_sampling == "sequential":
        return None
    # an env whose reset info has no "level" is one level: probed once, then never again
    leveled = [True]

    def level_of(seed: int) -> str:
        if not leveled[0]:
            return ""
        level = reset_level(cfg.env.id, seed, **replay_kwargs(run))
        leveled[0] = level is not None
        return level or ""

    ranks = run.ranks
    return TaskPool(
        seed=cfg.seed * max(ranks.world_size, 1) + ranks.rank,
        seed_start=cfg.env.train_seed_start,
        difficulty=cfg.sampling.task_sampling == "difficulty",
        level_of=level_of,
    )


def make_critic(run: Run) -> Critic | None:
    """PPO's critic on the run's model (methods in ``CRITIC_ALGORITHMS``), else None."""
    from agentic_rl.trainer.learning.credit import CRITIC_ALGORITHMS

    cfg = run.config
    alg = cfg.algorithm
    if alg.name not in CRITIC_ALGORITHMS:
        return None
    return Critic(
        run.model, cfg.ppo.value_lr, alg.gamma, alg.lam, cfg.ppo.value_clip, cfg.optim.max_grad_norm
    )


def loss_settings(config: TrainConfig, precision: str = "fp32") -> LossSettings:
    """The :class:`~agentic_rl.trainer.learning.update.LossSettings` of the run's policy-gradient steps
    (first PPO epoch); ``loss_norm_constant`` 0 becomes the generation budget
    ``rollout.max_turns × rollout.max_new_tokens``, ``dual_clip`` 0 becomes None (off);
    ``precision``: the run's resolved precision (``Run.placement.precision``)."""
    loss, optim, rollout = config.loss, config.optim, config.rollout
    return LossSettings(
        micro_batch_size=optim.micro_batch_size,
        micro_batch_tokens=optim.micro_batch_tokens,
        clip_eps_low=loss.clip_eps_low,
        clip_eps_high=loss.clip_eps_high,
        dual_clip=loss.dual_clip or None,
        kl_coef=loss.kl_coef,
        kl_estimator=loss.kl_estimator,
        kl_mode=loss.kl_mode,
        temperature=rollout.temperature,
        max_grad_norm=optim.max_grad_norm,
        loss_agg=loss.loss_agg,
        loss_norm_constant=loss.loss_norm_constant or rollout.max_turns * rollout.max_new_tokens,
        gamma=config.algorithm.gamma,
        tis_cap=loss.tis_cap,
        mis_low=loss.mis_low,
        mis_high=loss.mis_high,
        mis_level=loss.mis_level,
        precision=precision,
    )
