"""optim.lr_warmup_steps: the linear learning-rate warm-up of the RL optimizer, checked by hand."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.trainer.learning.optim import linear_lr_warmup


def _adamw(lr: float) -> tuple[torch.nn.Parameter, torch.optim.AdamW]:
    p = torch.nn.Parameter(torch.zeros(3))
    return p, torch.optim.AdamW([p], lr=lr, weight_decay=0.0, fused=True)


def test_steps_ramp_linearly_then_hold():
    p, opt = _adamw(1e-2)
    linear_lr_warmup(opt, 1e-2, 4)
    lrs, moves = [], []
    for _ in range(6):
        before = p.detach().clone()
        p.grad = torch.ones(3)
        opt.step()
        lrs.append(opt.param_groups[0]["lr"])
        moves.append(float((before - p.detach())[0]))
    assert lrs == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])
    # a constant gradient: Adam's bias-corrected m/sqrt(v) is 1, so each move is that step's lr
    assert moves == pytest.approx(lrs, rel=1e-4)


def test_schedule_continues_from_the_optimizer_state():
    """A resumed run (optimizer state loaded) goes on at the step it reached, not at step 1."""
    p, opt = _adamw(1e-2)
    for _ in range(2):
        p.grad = torch.ones(3)
        opt.step()
    state = opt.state_dict()
    q, resumed = _adamw(1e-2)
    resumed.load_state_dict(state)
    linear_lr_warmup(resumed, 1e-2, 4)
    q.grad = torch.ones(3)
    resumed.step()
    assert resumed.param_groups[0]["lr"] == pytest.approx(0.0075)  # step 3 of 4


@pytest.mark.parametrize("steps, lr", [(0, 1e-3), (4, 0.0)])
def test_bad_settings_are_refused(steps, lr):
    _, opt = _adamw(1e-3)
    with pytest.raises(ValueError, match="warmup_steps >= 1 and lr > 0"):
        linear_lr_warmup(opt, lr, steps)


def test_config_refuses_a_negative_warmup():
    from agentic_rl.config import load_config
    from agentic_rl.errors import ConfigError

    with pytest.raises(ConfigError, match="optim.lr_warmup_steps"):
        load_config(None, ["optim.lr_warmup_steps=-1"])
