"""Data-parallel invariant: 2 gloo ranks, each with half the groups, make the same parameter
update as 1 process accumulating gradients over the whole batch.

Tolerance: |Δθ_ddp − Δθ_single| <= 1e-6 + 1e-4·|Δθ_single| elementwise. Both sides do the same
fp32 arithmetic except the order of summation (per-rank sums, then an all-reduce), which moves
results by a few float32 ulps (~1e-7 relative); 1e-4 leaves room for that. The ranks hold
different numbers of trained tokens (checked below), so plain DDP's unweighted mean of the
rank gradients would not match; clipping is active, so the global norm must be used.
"""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentic_rl.trainer.parallel.distributed import (
    DataParallelOptimizer,
    DistContext,
    data_parallel_update,
    normalizer_count,
    shard,
    trained_tokens,
)
from agentic_rl.types import StopReason, Trajectory

MAX_GRAD_NORM = 0.05  # small enough that clipping is active: the global norm must be used


def _trajectory(
    rng: random.Random, vocab: int, gid: str, n_prompt: int, n_sampled: int
) -> Trajectory:
    ids = tuple(rng.randrange(3, vocab) for _ in range(n_prompt + n_sampled))
    mask = (0,) * n_prompt + (1,) * n_sampled
    logprobs = (0.0,) * n_prompt + tuple(-10.0 - rng.random() for _ in range(n_sampled))
    return Trajectory(
        "test-v0",
        0,
        gid,
        f"{gid}-{rng.random()}",
        (),
        (),
        ids,
        mask,
        logprobs,
        StopReason.TERMINATED,
    )


def _groups(vocab: int) -> list[tuple[list[Trajectory], list[float]]]:
    rng = random.Random(7)
    groups = []
    # 4 groups of 2; the first two (rank 0) are short, the last two (rank 1) long: n_0 != n_1
    for g, (lo, hi) in enumerate([(3, 6), (3, 6), (9, 14), (9, 14)]):
        trajs = [
            _trajectory(rng, vocab, f"g{g}", rng.randint(2, 5), rng.randint(lo, hi))
            for _ in range(2)
        ]
        groups.append((trajs, [1.0, -1.0]))
    return groups


def _single_process_update(
    model_dir: Path, groups, loss_agg: str = "token-mean"
) -> tuple[dict, dict]:
    from transformers import AutoModelForCausalLM

    from agentic_rl.trainer.learning.update import LossSettings, policy_gradient_update

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    trajs = [t for g, _ in groups for t in g]
    advs = [a for _, adv in groups for a in adv]
    metrics = policy_gradient_update(
        model,
        opt,
        trajs,
        advs,
        LossSettings(micro_batch_size=2, max_grad_norm=MAX_GRAD_NORM, loss_agg=loss_agg),
    ).metrics
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, metrics


LOSS_AGGS = ("token-mean", "seq-mean-token-mean")  # normalised by tokens, by trajectories


def test_two_ranks_match_one_process_with_accumulation(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(tiny_model_dir).vocab_size
    groups = _groups(vocab)
    (tmp_path / "groups.pkl").write_bytes(pickle.dumps(groups))
    worker = Path(__file__).with_name("ddp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(worker),
        str(tiny_model_dir),
        str(tmp_path / "groups.pkl"),
        str(tmp_path),
        str(MAX_GRAD_NORM),
        ",".join(LOSS_AGGS),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]

    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    for loss_agg in LOSS_AGGS:
        single, single_metrics = _single_process_update(tiny_model_dir, groups, loss_agg)
        ranks = [
            torch.load(tmp_path / f"rank{r}-{loss_agg}.pt", weights_only=False) for r in range(2)
        ]
        assert (
            ranks[0]["local_tokens"] != ranks[1]["local_tokens"]
        )  # uneven shards: weighting matters
        assert single_metrics["train/grad_norm"] > MAX_GRAD_NORM  # clipping was active
        for r in ranks:
            for name, p_single in single.items():
                delta_single = p_single - before[name]
                delta_ddp = r["state"][name] - before[name]
                torch.testing.assert_close(
                    delta_ddp, delta_single, rtol=1e-4, atol=1e-6, msg=f"{loss_agg} {name}"
                )
            m = r["metrics"]
            assert m["train/tokens"] == single_metrics["train/tokens"]
            assert m["train/grad_norm"] == pytest.approx(
                single_metrics["train/grad_norm"], rel=1e-4
            )
            assert m["train/loss"] == pytest.approx(
                single_metrics["train/loss"], rel=1e-4, abs=1e-6
            )
            assert m["train/clip_fraction"] == pytest.approx(
                single_metrics["train/clip_fraction"], abs=1e-6
            )
        # the update is visible (not a no-op comparison): the embedding moved
        assert (
            single["model.embed_tokens.weight"] - before["model.embed_tokens.weight"]
        ).abs().max() > 1e-4
    _check_sft(
        tiny_model_dir,
        groups,
        before,
        [torch.load(tmp_path / f"rank{r}-sft.pt", weights_only=False) for r in range(2)],
    )


def _check_sft(model_dir: Path, groups, before: dict, ranks: list[dict]) -> None:
    """The warm-up step: NLL per trained token over both ranks' demos, as one process computes it."""
    from transformers import AutoModelForCausalLM

    from agentic_rl.trainer.learning.update import sft_update

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    metrics = sft_update(
        model,
        torch.optim.SGD(model.parameters(), lr=1.0),
        [t for g, _ in groups for t in g],
        micro_batch_size=2,
        max_grad_norm=MAX_GRAD_NORM,
    )
    assert metrics["train/grad_norm"] > MAX_GRAD_NORM  # clipping was active
    for r in ranks:
        for name, p_single in model.state_dict().items():
            torch.testing.assert_close(
                r["state"][name] - before[name],
                p_single - before[name],
                rtol=1e-4,
                atol=1e-6,
                msg=f"sft {name}",
            )
        assert r["metrics"]["train/loss"] == pytest.approx(metrics["train/loss"], rel=1e-4)
        assert r["metrics"]["train/tokens"] == metrics["train/tokens"]


def test_single_process_context_is_a_plain_step(tiny_model_dir):
    """World size 1: the wrapper is the identity around the optimizer (same update, no collectives)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from agentic_rl.trainer.learning.update import LossSettings, policy_gradient_update

    groups = _groups(AutoConfig.from_pretrained(tiny_model_dir).vocab_size)
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    opt = DataParallelOptimizer(
        torch.optim.SGD(model.parameters(), lr=1.0), DistContext(), max_grad_norm=MAX_GRAD_NORM
    )
    trajs = [t for g, _ in groups for t in g]
    metrics = data_parallel_update(
        policy_gradient_update,
        model,
        opt,
        trajs,
        [a for _, adv in groups for a in adv],
        LossSettings(micro_batch_size=2),
    ).metrics
    single, single_metrics = _single_process_update(tiny_model_dir, groups)
    for name, p in model.state_dict().items():
        torch.testing.assert_close(
            p - before[name], single[name] - before[name], rtol=1e-5, atol=1e-7
        )
    assert metrics["train/tokens"] == trained_tokens(trajs) == single_metrics["train/tokens"]


def test_shard_splits_groups_contiguously_and_completely():
    items = list(range(7))
    parts = [shard(items, DistContext(rank=r, world_size=3)) for r in range(3)]
    assert parts == [[0, 1], [2, 3], [4, 5, 6]]  # 7·r//3 boundaries: 0, 2, 4, 7
    assert shard([0], DistContext(rank=0, world_size=2)) == []  # a rank may get nothing


def test_normalizer_count_follows_the_loss_aggregation():
    groups = _groups(1000)
    trajs = [t for g, _ in groups for t in g]
    assert normalizer_count(trajs, "token-mean") == trained_tokens(trajs)
    assert (
        normalizer_count(trajs, "seq-mean-token-mean")
        == normalizer_count(trajs, "seq-mean-token-sum")
        == 8
    )
    with pytest.raises(ValueError, match="loss aggregation"):
        normalizer_count(trajs, "sum")


def test_negative_token_count_is_rejected():
    opt = DataParallelOptimizer(
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), DistContext()
    )
    with pytest.raises(ValueError, match="token count"):
        opt.set_local_tokens(-1)
