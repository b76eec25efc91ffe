"""The RL phase's sections, one per concern: ``[algorithm]`` (the method and its credit
assignment), ``[sampling]`` (which tasks a step trains on), ``[loss]`` (the PPO-clip loss and
its KL term), ``[optim]`` (optimizer steps and micro-batching) and ``[ppo]`` (the critic of
``algorithm.name = "ppo"``). Each field's range or choice rule sits beside it
(:mod:`agentic_rl.config.rules`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentic_rl.config import bounds
from agentic_rl.config.rules import (
    check_rules,
    non_negative,
    one_of,
    positive,
    unit_interval,
)

__all__ = [
    "AlgorithmConfig",
    "LossConfig",
    "OptimConfig",
    "PPOConfig",
    "SamplingConfig",
    "check_off_policy",
    "check_rollouts_per_round",
]


@dataclass(frozen=True)
class AlgorithmConfig:
    """``[algorithm]``: the RL method, its budget and its credit assignment.

    Attributes:
        name: credit assignment method: ``grpo`` | ``dr_grpo`` | ``rloo`` | ``reinforce_pp`` |
            ``ppo`` | ``gigpo`` | ``turn_grpo`` (table in :mod:`agentic_rl.trainer.learning.credit`).
        steps: optimizer steps of RL (RL steps; each takes ``optim.minibatches`` ×
            ``optim.ppo_epochs`` optimizer steps).
        tasks_per_step: distinct tasks (groups) per step.
        group_size: G rollouts per task, all from the same seed.
        std_eps: ε of GRPO's (r − mean) / (std + ε), in reward units. A value well above
            float epsilon (default 0.1) keeps groups whose rewards differ only by small cost
            terms (a few tokens) from being blown up to unit advantages; real successes and
            failures (std ≈ 0.3–0.5) are scaled almost as with ε → 0. Used by ``grpo``,
            ``gigpo`` and ``turn_grpo``.
        std_scope: ``group`` (std of the task's group) or ``batch`` (std of the whole step's
            rewards, group mean kept) for ``grpo``.
        gamma: discount γ over turns (gigpo, turn_grpo) or tokens (ppo, reinforce_pp).
        lam: GAE λ (ppo).
        gigpo_step_weight: ω, weight of GiGPO's step-level advantage.
        process_coef: c, weight of the per-turn process credit (turn_grpo).
        time_budget_s: a budget in seconds for the RL steps (rollouts + updates, evals excluded)
            of this process: RL stops, even before ``steps``, at the step count whose expected
            total is closest to it (see ``trainer.recipe.budget_reached``); 0 = no time limit.
            For equal wall-clock comparisons of algorithms.
        max_off_policy_steps: k of async training (:mod:`agentic_rl.trainer.sampling.async_producer`):
            0 = the synchronous loop (each step samples, then trains); k >= 1 = a producer
            samples the rollouts of the next steps while the current one trains, and no
            trajectory whose oldest token is more than k policy versions behind the trainer is
            trained on (dropped, counted in ``rollout/dropped_stale``).
    """

    name: str = "grpo"
    steps: int = positive(9, bounds.MAX_STEPS)
    tasks_per_step: int = positive(4, bounds.MAX_ROLLOUTS_PER_STEP)
    group_size: int = positive(8, bounds.MAX_GROUP_SIZE)
    std_eps: float = non_negative(0.1)
    std_scope: str = one_of("group", "group", "batch")
    gamma: float = unit_interval(1.0)
    lam: float = unit_interval(0.95)
    gigpo_step_weight: float = non_negative(1.0)
    process_coef: float = non_negative(0.5)
    time_budget_s: float = non_negative(0.0, bounds.MAX_TIME_BUDGET_S)
    max_off_policy_steps: int = non_negative(0, bounds.MAX_ROUNDS)

    def __post_init__(self) -> None:
        check_rules(self, "algorithm")


def check_rollouts_per_round(config) -> None:
    """Bound the rollouts of one sampling round, tasks × ``algorithm.group_size``, by
    :data:`~agentic_rl.config.bounds.MAX_ROLLOUTS_PER_STEP` (tasks: ``algorithm.tasks_per_step``
    and ``sampling.rollout_tasks``); ``config`` is a whole :class:`~agentic_rl.config.TrainConfig`.

    Raises:
        ValueError: naming the keys and the product.
    """
    g = config.algorithm.group_size
    for key, tasks in (
        ("algorithm.tasks_per_step", config.algorithm.tasks_per_step),
        ("sampling.rollout_tasks", config.sampling.rollout_tasks),
    ):
        if tasks * g > bounds.MAX_ROLLOUTS_PER_STEP:
            raise ValueError(
                f"key '{key}' × 'algorithm.group_size' = {tasks} × {g} rollouts per sampling "
                f"round; at most {bounds.MAX_ROLLOUTS_PER_STEP}"
            )


def check_off_policy(config) -> None:
    """Reject the settings async training (``algorithm.max_off_policy_steps`` >= 1) does not
    support; ``config`` is a whole :class:`~agentic_rl.config.TrainConfig`.

    Raises:
        ValueError: naming ``algorithm.max_off_policy_steps``: with ``rollout.backend =
            "openai"`` (its weights are never synced, so every step would wait for a version the
            server never gets), or with ``"vllm"`` and LoRA (the adapter in-flight requests name
            is unloaded at a sync) or oracle guidance (scored with the trainer's weights while
            they train; the local backend scores it with the sampler's own copy).
    """
    if config.algorithm.max_off_policy_steps == 0:
        return
    backend = config.rollout.backend
    reason = None
    if backend == "openai":
        reason = "rollout.backend = 'openai' never syncs weights; use 'local' or 'vllm'"
    elif backend == "vllm" and config.model.lora:
        reason = "rollout.backend = 'vllm' with model.lora is not supported"
    elif backend == "vllm" and config.sampling.guidance != "off":
        reason = "rollout.backend = 'vllm' needs sampling.guidance = 'off'"
    if reason:
        raise ValueError(f"key 'algorithm.max_off_policy_steps' >= 1: {reason}")


@dataclass(frozen=True)
class SamplingConfig:
    """``[sampling]``: which tasks an RL step trains on.

    Attributes:
        task_sampling: how RL task seeds are drawn: ``sequential`` (seeds ``train_seed_start +
            step × tasks_per_step + j``, the same for every run seed), ``uniform`` (a stream
            seeded by ``seed``) or ``difficulty`` (that stream, accepting levels by the task
            pool's weights, see :mod:`agentic_rl.trainer.sampling.task_pool`).
        dynamic_sampling: DAPO's dynamic sampling: drop groups whose rollouts all have the same
            outcome and sample more rounds of tasks until ``algorithm.tasks_per_step``
            informative groups are found (:mod:`agentic_rl.trainer.sampling.task_pool`).
        rollout_tasks: tasks sampled per round of dynamic sampling (0 = ``tasks_per_step``).
        max_sample_rounds: cap on rounds of dynamic sampling per step (>= 1).
        guidance: off-policy guidance (LUFFY-style): ``off``, or ``oracle``: a group whose
            rollouts all failed gets the env oracle's successful episode in place of its last
            rollout (:mod:`agentic_rl.trainer.sampling.guidance`).
        guidance_groups: most groups per sampling round that get guidance (>= 0).
    """

    task_sampling: str = one_of("difficulty", "sequential", "uniform", "difficulty")
    dynamic_sampling: bool = True
    rollout_tasks: int = non_negative(8, bounds.MAX_ROLLOUTS_PER_STEP)
    max_sample_rounds: int = positive(2, bounds.MAX_ROUNDS)
    guidance: str = one_of("oracle", "off", "oracle")
    guidance_groups: int = non_negative(2, bounds.MAX_ROLLOUTS_PER_STEP)

    def __post_init__(self) -> None:
        check_rules(self, "sampling")


@dataclass(frozen=True)
class LossConfig:
    """``[loss]``: the PPO-clip policy loss and its KL term.

    Attributes:
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
        tis_cap: sampler/trainer mismatch correction by truncated importance sampling: each
            token's loss × min(π_old/μ, tis_cap), π_old the trainer's own logprobs (one no-grad
            forward per RL step), μ the sampler's (Yao et al. 2025). 0 = off, else > 1 (e.g. 2).
        mis_low, mis_high: masked importance sampling (IcePop): tokens (or sequences) whose
            π_old/μ lies outside [mis_low, mis_high] drop out of the loss. Both 0 = off; with one
            set, 0 for the other means no bound on that side; mis_low <= 1 <= mis_high.
        mis_level: ``token`` (per-token ratio) or ``sequence`` (the sequence's geometric-mean
            ratio decides for all its tokens). See :mod:`agentic_rl.trainer.learning.mismatch_correction`.
    """

    clip_eps_low: float = unit_interval(0.2)
    clip_eps_high: float = non_negative(0.28)
    dual_clip: float = non_negative(0.0)  # and 0 or > 1: __post_init__
    kl_coef: float = non_negative(0.0)
    kl_estimator: str = one_of("k3", "k1", "k2", "k3")
    kl_mode: str = one_of("loss", "loss", "reward")
    loss_agg: str = one_of("token-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
    loss_norm_constant: float = non_negative(0.0)
    tis_cap: float = non_negative(0.0)
    mis_low: float = unit_interval(0.0)
    mis_high: float = non_negative(0.0)
    mis_level: str = one_of("token", "token", "sequence")

    def __post_init__(self) -> None:
        check_rules(self, "loss")
        if self.dual_clip != 0.0 and not self.dual_clip > 1.0:
            raise ValueError(f"loss.dual_clip must be 0 (off) or > 1, got {self.dual_clip}")
        if self.tis_cap != 0.0 and not self.tis_cap > 1.0:
            raise ValueError(f"loss.tis_cap must be 0 (off) or > 1, got {self.tis_cap}")
        if self.mis_high != 0.0 and not self.mis_high >= 1.0:
            raise ValueError(f"loss.mis_high must be 0 (off) or >= 1, got {self.mis_high}")


@dataclass(frozen=True)
class OptimConfig:
    """``[optim]``: the optimizer steps of an RL step and how each is computed.

    Attributes:
        lr: AdamW learning rate; weight_decay: AdamW weight decay.
        lr_warmup_steps: linear learning-rate warm-up of the RL optimizer: optimizer step k
            (1-based) uses ``lr * min(1, k / lr_warmup_steps)`` (0 = off). A fresh AdamW's
            first steps move every weight by about ``lr`` whatever its gradient (m/√v ≈ ±1).
        max_grad_norm: gradient clipping (0 = off).
        micro_batch_size: most trajectories per forward/backward (the warm-up's too).
        micro_batch_tokens: most padded tokens (rows × longest) per forward/backward; bounds
            the update's activation memory (~1.4 MB per token for SmolLM2-135M), whatever the
            episode lengths. 0 = no cap. Neither changes the gradient, only memory and speed.
        ppo_epochs: optimizer passes over each batch of rollouts (PPO epochs). Later epochs reuse
            the first pass's advantages (and, for ``ppo``, its values as V_old, so the value
            clip is active); the ratio ρ then moves away from 1 and the PPO clip bites.
        minibatches: optimizer steps per epoch over a batch of rollouts: the kept groups are split
            into this many minibatches of whole groups, one PPO-clip step each (PPO's
            minibatching, Schulman et al. 2017). From the second minibatch on the policy has
            moved since sampling, so the ratio differs from 1 and the clip acts; the update's
            compute is the same as one step over the whole batch.
        skip_zero_advantage: drop trajectories whose advantages are all exactly 0 from the
            update (they carry no policy gradient; with loss.kl_coef > 0 or ppo they are kept).
    """

    lr: float = positive(3e-5)
    lr_warmup_steps: int = non_negative(0, bounds.MAX_STEPS)
    weight_decay: float = non_negative(0.0)
    max_grad_norm: float = non_negative(1.0)
    micro_batch_size: int = positive(8, bounds.MAX_BATCH)
    micro_batch_tokens: int = non_negative(2048, bounds.MAX_TOKENS)
    ppo_epochs: int = positive(1, bounds.MAX_EPOCHS)
    minibatches: int = positive(4, bounds.MAX_BATCH)
    skip_zero_advantage: bool = True

    def __post_init__(self) -> None:
        check_rules(self, "optim")


@dataclass(frozen=True)
class PPOConfig:
    """``[ppo]``: the critic of ``algorithm.name = "ppo"`` (a value head on the policy).

    Attributes:
        value_lr: AdamW learning rate of the value head.
        value_clip: the value loss's clip range around V_old (0 = unclipped).
    """

    value_lr: float = non_negative(1e-3)
    value_clip: float = non_negative(0.2)

    def __post_init__(self) -> None:
        check_rules(self, "ppo")
