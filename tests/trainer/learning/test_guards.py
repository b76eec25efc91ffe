"""Numerical guards: a non-finite loss, gradient or weight stops training with one clear error,
before it changes a weight or reaches a checkpoint (the CLI case: tests/test_user_errors.py)."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.errors import AgenticRLError
from agentic_rl.trainer.learning.guards import NonFiniteError, check_finite, check_finite_weights
from agentic_rl.trainer.learning.update import _finish_step
from agentic_rl.trainer.records.checkpoint import CheckpointProgress, save_checkpoint


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, torch.tensor(math.nan), torch.tensor([math.inf])]
)
def test_check_finite_raises_a_user_error_naming_what(value):
    with pytest.raises(NonFiniteError, match="non-finite gradient norm") as info:
        check_finite(value, "gradient norm")
    assert isinstance(info.value, AgenticRLError)  # the CLI prints it as one error line, exit 2


def test_check_finite_accepts_finite_values():
    for value in (0.0, -1e30, 3, torch.tensor(2.5)):
        check_finite(value, "loss")


def test_check_finite_weights_names_the_tensor():
    good = [torch.ones(3), torch.zeros(2, 2)]
    check_finite_weights(good, "x")
    check_finite_weights([], "x")
    with pytest.raises(NonFiniteError, match=r"tensor #1"):
        check_finite_weights([torch.ones(3), torch.tensor([1.0, math.nan])], "after step 3")


def test_a_nan_gradient_changes_no_weight():
    model = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.tensor([[math.nan, 1.0]])).sum().backward()
    with pytest.raises(NonFiniteError, match="gradient norm"):
        _finish_step(model, optimizer, max_grad_norm=1.0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_non_finite_weights_are_never_checkpointed(tmp_path):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    with torch.no_grad():
        model.weight[0, 0] = math.inf
    with pytest.raises(NonFiniteError, match="RL step 4"):
        save_checkpoint(
            tmp_path, model, optimizer, torch.Generator(), CheckpointProgress(4, [], {})
        )
    assert not (tmp_path / "checkpoints" / "step-000004").exists()
