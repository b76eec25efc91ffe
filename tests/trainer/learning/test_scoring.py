"""pack(): right-padded micro-batches of exact token streams; shapes worked out by hand."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.trainer.learning.scoring import pack
from agentic_rl.types import StopReason, Trajectory


def _traj(ids, mask, logprobs) -> Trajectory:
    return Trajectory(
        "x-v0", 0, "g", "t", (), (), tuple(ids), tuple(mask), tuple(logprobs), StopReason.TERMINATED
    )


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


def _segmented(ids, mask, logprobs, starts, tid="s") -> Trajectory:
    return Trajectory(
        "x-v0",
        0,
        "g",
        tid,
        (),
        (),
        tuple(ids),
        tuple(mask),
        tuple(logprobs),
        StopReason.TERMINATED,
        segment_starts=tuple(starts),
    )


def test_pack_segments_by_hand():
    # segment 0 = [5, 6, 7] (7 sampled), segment 1 = [8, 9, 10, 11] (prompt 8, 9; sampled 10, 11)
    a = _segmented(
        [5, 6, 7, 8, 9, 10, 11],
        [0, 0, 1, 0, 0, 1, 1],
        [0.0, 0.0, -0.1, 0.0, 0.0, -0.2, -0.3],
        [0, 3],
    )
    b = _traj([12, 13, 14], [0, 1, 1], [0.0, -0.4, -0.5])  # one segment: its own row
    batch = pack([a, b])
    # the trajectory layout is what it was without segments
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 0, 0, 0, 0]]
    assert batch.target_mask.tolist() == [
        [False, True, False, False, True, True],
        [True, True] + [False] * 4,
    ]
    assert batch.rows.tolist() == [0, 0, 0, 1, 1]
    assert torch.allclose(batch.old_logprobs, torch.tensor([-0.1, -0.2, -0.3, -0.4, -0.5]))
    # the model reads one row per segment, each from its own start
    seg = batch.segments
    assert seg.input_ids.tolist() == [[5, 6, 7, 0], [8, 9, 10, 11], [12, 13, 14, 0]]
    assert seg.attention_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
    assert seg.target_mask.tolist() == [
        [False, True, False],
        [False, True, True],
        [True, True, False],
    ]
    # row-major, the segment rows' targets are the trajectory layout's targets in the same order
    assert (
        seg.input_ids[:, 1:][seg.target_mask].tolist()
        == batch.input_ids[:, 1:][batch.target_mask].tolist()
    )


def test_pack_without_segments_is_unchanged():
    a = _traj([5, 6, 7], [0, 1, 1], [0.0, -0.1, -0.2])
    assert pack([a]).segments is None


def test_pack_rejects_bad_segment_starts():
    with pytest.raises(ValueError, match="sampled token"):
        pack([_segmented([1, 2, 3, 4], [0, 1, 1, 1], [0.0] * 4, [0, 2])])
    for starts in ([1], [0, 2, 2], [0, 4]):
        with pytest.raises(ValueError, match="segment_starts"):
            pack([_segmented([1, 2, 3, 4], [0, 1, 0, 1], [0.0] * 4, starts)])


def test_score_of_segments_equals_scoring_each_segment_alone(tiny_model_dir):
    """Each segment is scored as its own sequence: the same logprobs as packing the segments as
    separate one-segment trajectories (exactly what the policy was fed when sampling)."""
    from agentic_rl.policy.model_loading import load_model
    from agentic_rl.trainer.learning.scoring import score

    model = load_model(tiny_model_dir).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 49152, (40,), generator=g).tolist()
    mask = (
        [0] * 8 + [1] * 6 + [0] * 10 + [1] * 4 + [0] * 5 + [1] * 7
    )  # segments start at 0, 14 and 28
    t = _segmented(ids, mask, [0.0] * 40, [0, 14, 28])
    alone = [
        _segmented(ids[a:b], mask[a:b], [0.0] * (b - a), [0], tid=f"p{a}") for a, b in t.segments
    ]
    with torch.no_grad():
        segmented = score(model, pack([t]))[0]
        separately = score(model, pack(alone))[0]
        as_one = score(model, pack([_segmented(ids, mask, [0.0] * 40, [0])]))[0]
    assert segmented.shape == (17,)  # 6 + 4 + 7 sampled tokens
    assert torch.allclose(segmented, separately, atol=1e-5)
    assert not torch.allclose(
        segmented[6:], as_one[6:], atol=1e-3
    )  # later segments see no earlier tokens
    assert torch.allclose(
        segmented[:6], as_one[:6], atol=1e-5
    )  # the first segment is the same either way


def test_entropy_over_more_rows_than_one_chunk_matches_the_full_softmax(tiny_model_dir):
    """score() computes the entropy in row chunks (bounded memory); it must equal the entropy of
    softmax(logits / T) over the whole vocabulary for every trained token, across chunk borders."""
    from agentic_rl.policy.model_loading import load_model
    from agentic_rl.trainer.learning import scoring

    model = load_model(tiny_model_dir).eval()
    g = torch.Generator().manual_seed(1)
    n = scoring._ENTROPY_CHUNK + 90  # trained tokens: one full chunk and a partial one
    ids = torch.randint(3, 49152, (n + 1,), generator=g).tolist()
    t = _traj(ids, [0] + [1] * n, [0.0] * (n + 1))
    with torch.no_grad():
        logprobs, entropy = scoring.score(model, pack([t]), temperature=0.7, with_entropy=True)
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float() / 0.7, dim=-1)
    expected = -(logp.exp() * logp).sum(-1)
    assert entropy.shape == logprobs.shape == (n,)
    assert torch.allclose(entropy, expected, atol=1e-4)
    assert torch.allclose(
        logprobs, logp.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0], atol=1e-4
    )
