"""A value head on the policy for PPO with GAE: V(s_t) = w · h_{t−1} + b.

The state before sampling token t is the context up to t − 1, whose last hidden state h_{t−1} is
exactly the row the LM head turns into the logits of token t. :func:`capture_head_inputs` hooks
the LM head during the policy's own scoring forward pass, so the values cost one extra
[N, H] × [H, 1] matmul and no second forward pass (the shared-prefix scoring path is unchanged).

The head reads the hidden states *detached*: the critic is a linear value probe on the policy's
features, trained by the clipped value loss with its own AdamW; the policy-gradient loss alone
shapes the backbone (no value-loss coefficient to tune against the policy loss, no interference
of the value gradient with the language model). This is the "shared features, separate head"
layout of many LLM PPO implementations with the trunk gradient stopped (cf. Huang et al. 2024,
"The N+ Implementation Details of RLHF with PPO", arXiv:2403.17031, on value-head choices).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from agentic_rl.algorithms import gae_advantages, value_loss
from agentic_rl.trainer.learning.batching import dense, per_token
from agentic_rl.trainer.learning.scoring import PackedBatch
from agentic_rl.types import Trajectory

__all__ = [
    "Critic",
    "CriticSetup",
    "ValueHead",
    "ValueModel",
    "capture_head_inputs",
    "critic_advantages",
    "hidden_size",
]

log = logging.getLogger(__name__)


class ValueHead(nn.Module):
    """Linear value head: [N, H] hidden states → [N] values (float32).

    Initialised to zero, so V ≡ 0 before training (GAE then starts as plain discounted returns).

    Args:
        hidden_size: H, the policy's hidden width.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        """Values of ``hidden`` [N, H] (detached from the policy) → [N] float32."""
        return self.linear(hidden.detach().float()).squeeze(-1)

    def save(self, path: Path, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Write the head's weights (and its optimizer state) to ``path``."""
        blob = {
            "state": self.state_dict(),
            "optimizer": optimizer.state_dict() if optimizer else None,
        }
        torch.save(blob, path)

    def load(self, path: Path, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Restore what :meth:`save` wrote."""
        blob = torch.load(path, weights_only=True)  # tensors and plain data only: no pickled code
        self.load_state_dict(blob["state"])
        if optimizer is not None and blob["optimizer"] is not None:
            optimizer.load_state_dict(blob["optimizer"])


def _head(model) -> nn.Module:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_output_embeddings()


def hidden_size(model) -> int:
    """H of a HF causal LM (the LM head's input width)."""
    head = _head(model)
    weight = getattr(head, "weight", None)
    if weight is None:
        raise ValueError("cannot read the hidden size off the model's output embeddings")
    return int(weight.shape[1])


@contextmanager
def capture_head_inputs(model) -> Iterator[list[Tensor]]:
    """Collect the inputs of the model's LM head while the context is open.

    Yields a list that receives one [N, H] tensor per head call (the hidden states of the rows
    the head is applied to; with :func:`agentic_rl.trainer.learning.scoring.score` these are the trained
    positions, in order). The hook is removed on exit, also on error.
    """
    captured: list[Tensor] = []

    def hook(_module, args, _output):
        captured.append(args[0])

    handle = _head(model).register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


class ValueModel:
    """PPO's value head and its own optimizer, as the recipe holds them.

    Args:
        hidden: H of the policy. lr: AdamW learning rate of the head. device: where it lives.
    """

    def __init__(self, hidden: int, lr: float, device: torch.device | str = "cpu"):
        self.head = ValueHead(hidden).to(device)
        self.optimizer = torch.optim.AdamW(
            self.head.parameters(), lr=lr, fused=torch.device(device).type in ("cpu", "cuda")
        )


@dataclass(frozen=True)
class CriticSetup:
    """PPO's value model for one :func:`~agentic_rl.trainer.learning.update.policy_gradient_update` call.

    Attributes:
        head: the value head (reads the policy's hidden states).
        optimizer: the head's own optimizer (stepped once per update).
        token_rewards: per trajectory, a list of length T (its token stream): the reward of each
            step, placed on the last sampled token of the turn that earned it, 0 elsewhere.
        gamma, lam: GAE's γ and λ over the sampled tokens (tool-output spans are skipped).
        clip_eps: clip range of the value loss (None = unclipped).
        max_grad_norm: gradient clipping of the head (0 = off).
        old_values: for a later PPO epoch over the same batch: per trajectory, the token-aligned
            values V_old of the first pass (``UpdateResult.values``). Then the given
            ``advantages`` (those of the first pass) are used as they are, the value targets are
            R = A + V_old, and the value loss is clipped around V_old; ``token_rewards`` are not
            read.
    """

    head: ValueHead
    optimizer: torch.optim.Optimizer
    token_rewards: Sequence[Sequence[float]]
    gamma: float = 1.0
    lam: float = 0.95
    clip_eps: float | None = 0.2
    max_grad_norm: float = 1.0
    old_values: Sequence[Sequence[float]] | None = None


def _gae(
    critic: CriticSetup,
    values: Tensor,
    rewards: Tensor,
    batch: PackedBatch,
    trajs: Sequence[Trajectory],
) -> tuple[Tensor, Tensor]:
    """GAE advantages and λ-returns [N] over each row's trained tokens, from values [N]."""
    v_dense = dense(values, batch)
    mask = batch.target_mask
    last = mask.shape[1] - 1 - mask.flip(1).long().argmax(dim=1)  # each row's last trained position
    # V at the last step (truncation)
    boot = v_dense[torch.arange(mask.shape[0], device=mask.device), last]
    adv, returns = gae_advantages(
        dense(rewards, batch),
        v_dense,
        mask,
        gamma=critic.gamma,
        lam=critic.lam,
        terminated=[t.terminated for t in trajs],
        bootstrap_values=boot,
    )
    return adv[mask].float().to(values.device), returns[mask].float().to(values.device)


def critic_advantages(
    critic: CriticSetup,
    hidden: Tensor,
    advantages,
    penalty: Tensor | None,
    idx: Sequence[int],
    batch: PackedBatch,
    mb: Sequence[Trajectory],
    total: int,
) -> tuple[Tensor, Tensor, Tensor, dict[str, float]]:
    """A micro-batch's GAE advantages [N] from the value head on ``hidden`` [N, H], and its value loss.

    First pass (``critic.old_values`` None): V from this pass, GAE(γ, λ) over the token rewards
    (plus the per-token KL ``penalty`` [N] when given). Later epochs: the given ``advantages``
    and V_old, returns R = A + V_old. The value loss (clipped around V_old, normalised by the
    step's ``total`` trained tokens) is :func:`~agentic_rl.algorithms.value_loss`.

    Returns:
        ``(advantages [N], values [N] detached, value loss (scalar, grad to the head), metric
        sums)``.
    """
    values = critic.head(hidden)  # [N], grad to the head only
    if critic.old_values is None:  # first pass: GAE from this pass's values
        rewards = per_token(critic.token_rewards, idx, batch)
        rewards = rewards if penalty is None else rewards + penalty
        adv, returns = _gae(critic, values.detach(), rewards, batch, mb)
        old = values.detach()
    else:  # later epoch: the first pass's advantages and values
        adv = per_token(advantages, idx, batch).to(values.device)
        old = per_token(critic.old_values, idx, batch).to(values.device)
        returns = adv + old
    vloss, vm = value_loss(
        values, old, returns, torch.ones_like(values), clip_eps=critic.clip_eps, normalizer=total
    )
    n = batch.num_tokens
    sums = {
        "value_clip_fraction": vm["value_clip_fraction"] * n,
        "explained_variance": vm["explained_variance"] * n,
        "value_loss": vloss.item(),
        "value_mean": float(values.detach().sum()),
    }
    return adv, values.detach(), vloss, sums


class Critic:
    """PPO's critic as one optional component of the recipe: a value head on the policy, its own
    AdamW, and the GAE and value-loss settings (``algorithm.gamma``, ``algorithm.lam``,
    ``ppo.value_clip``, ``optim.max_grad_norm``). Critic-free methods have none (None).

    Args:
        policy_model: the HF causal LM whose hidden states the head reads (its width and device).
        lr: AdamW learning rate of the head (``ppo.value_lr``).
        gamma, lam: GAE's γ and λ. clip_eps: value-loss clip range (0 = unclipped).
        max_grad_norm: gradient clipping of the head (0 = off).
    """

    def __init__(
        self,
        policy_model,
        lr: float,
        gamma: float,
        lam: float,
        clip_eps: float,
        max_grad_norm: float,
    ):
        device = next(policy_model.parameters()).device
        self.value_model = ValueModel(hidden_size(policy_model), lr, device)
        self.gamma, self.lam = gamma, lam
        self.clip_eps, self.max_grad_norm = clip_eps, max_grad_norm

    def setup(
        self,
        token_rewards: Sequence[Sequence[float]],
        old_values: Sequence[Sequence[float]] | None = None,
    ) -> CriticSetup:
        """The :class:`CriticSetup` of one update on a minibatch (``old_values``: a later epoch)."""
        return CriticSetup(
            self.value_model.head,
            self.value_model.optimizer,
            token_rewards,
            gamma=self.gamma,
            lam=self.lam,
            clip_eps=self.clip_eps or None,
            max_grad_norm=self.max_grad_norm,
            old_values=old_values,
        )

    def save(self, checkpoint: Path) -> None:
        """Write the head and its optimizer state as ``checkpoint/value_head.pt``."""
        self.value_model.head.save(checkpoint / "value_head.pt", self.value_model.optimizer)

    def load(self, checkpoint: Path) -> None:
        """Restore ``checkpoint/value_head.pt``; a checkpoint without one (killed between
        writing the checkpoint and the head) leaves the head at zero, with a warning."""
        path = checkpoint / "value_head.pt"
        if path.is_file():
            self.value_model.head.load(path, self.value_model.optimizer)
        else:
            log.warning("no value head in %s: PPO's value head restarts from zero", checkpoint)
