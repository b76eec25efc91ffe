"""pack(): right-padded micro-batches of exact token streams; shapes worked out by hand."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.trainer.scoring import pack
from agentic_rl.types import StopReason, Trajectory


def _traj(ids, mask, logprobs) -> Trajectory:
    return Trajectory("x-v0", 0, "g", "t", (), (), tuple(ids), tuple(mask), tuple(logprobs), StopReason.TERMINATED)


def test_pack_by_hand():
    a = _traj([5, 6, 7], [0, 1, 1], [0.0, -0.1, -0.2])
    b = _traj([8, 9, 10, 11, 12], [1, 0, 1, 1, 0], [-9.0, 0.0, -0.3, -0.4, 0.0])
    batch = pack([a, b])
    assert batch.input_ids.tolist() == [[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    # targets are ids[:, 1:]; the first token (even with mask 1) is never a target
    assert batch.target_mask.tolist() == [[True, True, False, False], [False, True, True, False]]
    assert batch.num_tokens == 4
    assert torch.allclose(batch.old_logprobs, torch.tensor([-0.1, -0.2, -0.3, -0.4]))
    assert batch.rows.tolist() == [0, 0, 1, 1]


def test_pack_errors():
    with pytest.raises(ValueError):
        pack([])
    with pytest.raises(ValueError, match="differ in length"):
        pack([_traj([1, 2], [0, 1], [0.0])])
