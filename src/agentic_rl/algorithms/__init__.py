"""Pure, tested RL algorithm functions: advantages (credit assignment), returns, losses, KL.

Torch and stdlib only (plus :mod:`agentic_rl.types` in ``trajectory_steps``). ``KL_ESTIMATORS``
maps the names users type in configs (``loss.kl_estimator``) to functions; the algorithm names
(``algorithm.name``) and their credit functions live in :mod:`agentic_rl.trainer.learning.credit`.

Modules: ``advantages`` (GRPO, Dr. GRPO, RLOO: one number per trajectory), ``returns``
(discounted returns, GAE(λ), REINFORCE++ over tokens or turns), ``turn_credit`` (GiGPO,
turn-level process credit), ``trajectory_steps`` (per-turn rewards, anchors, token ↔ turn map
read off a Trajectory), ``losses`` (PPO clip, value loss, KL k1/k2/k3, entropy, aggregation),
``mismatch`` (sampler/trainer mismatch: truncated and masked importance sampling, mismatch KL).
"""

from agentic_rl.algorithms.advantages import (
    dr_grpo_advantages,
    grpo_advantages,
    rloo_advantages,
)
from agentic_rl.algorithms.losses import (
    KL_ESTIMATORS,
    KL_LOG_RATIO_CLAMP,
    LOSS_AGGREGATIONS,
    entropy_from_logits,
    estimate_kl,
    get_kl_estimator,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    ppo_clip_loss,
    token_logprobs_from_logits,
    token_loss_weights,
    value_loss,
)
from agentic_rl.algorithms.mismatch import masked_is, mismatch_kl, truncated_is_weights
from agentic_rl.algorithms.returns import (
    discounted_returns,
    gae_advantages,
    masked_whiten,
    reinforce_pp_advantages,
)
from agentic_rl.algorithms.turn_credit import (
    gigpo_advantages,
    turn_process_advantages,
)

__all__ = [
    "KL_ESTIMATORS",
    "KL_LOG_RATIO_CLAMP",
    "LOSS_AGGREGATIONS",
    "discounted_returns",
    "dr_grpo_advantages",
    "entropy_from_logits",
    "estimate_kl",
    "gae_advantages",
    "get_kl_estimator",
    "gigpo_advantages",
    "grpo_advantages",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_is",
    "masked_mean",
    "masked_whiten",
    "mismatch_kl",
    "ppo_clip_loss",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "token_logprobs_from_logits",
    "token_loss_weights",
    "truncated_is_weights",
    "turn_process_advantages",
    "value_loss",
]
