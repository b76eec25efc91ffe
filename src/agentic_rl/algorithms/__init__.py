"""Pure, tested RL algorithm functions: advantages (credit assignment), losses, KL estimators.

Torch and stdlib only. Registries (``ADVANTAGE_ESTIMATORS``, ``KL_ESTIMATORS``) map the names
users type in configs to functions; everything else is a direct import.
"""

from agentic_rl.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    broadcast_to_tokens,
    dr_grpo_advantages,
    get_advantage_estimator,
    grpo_advantages,
    rloo_advantages,
)
from agentic_rl.algorithms.losses import (
    KL_ESTIMATORS,
    entropy_from_logits,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    ppo_clip_loss,
    token_logprobs_from_logits,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "broadcast_to_tokens",
    "dr_grpo_advantages",
    "entropy_from_logits",
    "get_advantage_estimator",
    "grpo_advantages",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean",
    "ppo_clip_loss",
    "rloo_advantages",
    "token_logprobs_from_logits",
]
