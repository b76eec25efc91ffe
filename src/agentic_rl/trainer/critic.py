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

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = ["ValueHead", "ValueModel", "capture_head_inputs", "hidden_size"]


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
    the head is applied to; with :func:`agentic_rl.trainer.scoring.score` these are the trained
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
