"""Checkpoints restore weights, optimizer, RNG states and progress exactly (tiny model)."""

from __future__ import annotations

import random

import pytest
import torch
from safetensors.torch import load_file

from agentic_rl.errors import RunDirError
from agentic_rl.policy.model_loading import load_model
from agentic_rl.trainer.records.checkpoint import (
    CheckpointProgress,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def _train_a_step(model, optimizer):
    ids = torch.arange(3, 19)[None]
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "config.toml").write_text("")
    return tmp_path


def test_round_trip(tiny_model_dir, run_dir):
    model = load_model(tiny_model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _train_a_step(model, optimizer)
    sampler = torch.Generator().manual_seed(5)
    sampler_draw = torch.rand(3, generator=sampler)  # advance it
    random.seed(11)
    torch.manual_seed(12)
    state = CheckpointProgress(3, [{"tag": "base", "eval/success": 0.5}], {"warmup_seconds": 1.5})
    path = save_checkpoint(run_dir, model, optimizer, sampler, state)
    assert path == run_dir / "checkpoints" / "step-000003"
    expected = {
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "exp_avg": [s["exp_avg"].clone() for s in optimizer.state.values()],
        "sampler": torch.rand(4, generator=sampler),
        "python": random.random(),
        "torch": torch.rand(2),
    }
    assert not torch.equal(sampler_draw, expected["sampler"][:3])

    fresh = load_model(tiny_model_dir)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    fresh_sampler = torch.Generator().manual_seed(0)
    random.seed(0)
    torch.manual_seed(0)
    restored = load_checkpoint(path, fresh, fresh_opt, fresh_sampler)
    assert restored == state
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, expected["weights"][k]), k
    assert fresh.get_output_embeddings().weight is fresh.get_input_embeddings().weight  # still tied
    assert all(
        torch.equal(a, s["exp_avg"]) for a, s in zip(expected["exp_avg"], fresh_opt.state.values())
    )
    assert torch.equal(torch.rand(4, generator=fresh_sampler), expected["sampler"])
    assert random.random() == expected["python"]
    assert torch.equal(torch.rand(2), expected["torch"])


def test_tied_weights_stored_once(tiny_model_dir, run_dir):
    model = load_model(tiny_model_dir)
    path = save_checkpoint(
        run_dir,
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.Generator(),
        CheckpointProgress(0, [], {}),
    )
    names = set(load_file(str(path / "trainable.safetensors")))
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    assert names == {n for n, _ in model.named_parameters()}


def test_older_checkpoints_are_removed_and_latest_wins(tiny_model_dir, run_dir):
    model = load_model(tiny_model_dir)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (0, 1, 2):
        save_checkpoint(run_dir, model, opt, torch.Generator(), CheckpointProgress(step, [], {}))
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-000002"]
    assert latest_checkpoint(run_dir) == run_dir / "checkpoints" / "step-000002"
    # a half-written checkpoint (killed while saving) is never picked
    (run_dir / "checkpoints" / ".tmp-step-000003").mkdir()
    (run_dir / "checkpoints" / "step-000004").mkdir()
    assert latest_checkpoint(run_dir) == run_dir / "checkpoints" / "step-000002"


def test_latest_checkpoint_errors(tmp_path, run_dir):
    with pytest.raises(RunDirError, match="no config.toml"):
        latest_checkpoint(tmp_path / "nope")
    with pytest.raises(RunDirError, match="no checkpoint"):
        latest_checkpoint(run_dir)


def test_mismatched_model_is_rejected(tiny_model_dir, run_dir):
    model = load_model(tiny_model_dir)
    path = save_checkpoint(
        run_dir,
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.Generator(),
        CheckpointProgress(0, [], {}),
    )
    other = load_model(tiny_model_dir)
    other.model.norm.weight.requires_grad_(False)  # a different set of trainable parameters
    with pytest.raises(RunDirError, match="does not match"):
        load_checkpoint(
            path,
            other,
            torch.optim.SGD([p for p in other.parameters() if p.requires_grad], lr=0.1),
            torch.Generator(),
        )
