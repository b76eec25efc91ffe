"""Generation workers in Ray actors: whole episodes sampled by a copy of the policy in each actor,
weights pushed through the object store, dead workers failing their episodes only; on a real
local Ray (2 CPUs, one per module) with the tiny random Llama."""

from __future__ import annotations

import os
import time
from functools import partial

import pytest

ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")

import torch  # noqa: E402

from agentic_rl.config import ModelConfig  # noqa: E402
from agentic_rl.policy.model_loading import load_model  # noqa: E402
from agentic_rl.rollout import RolloutConfig  # noqa: E402
from agentic_rl.rollout.generation_workers import (  # noqa: E402
    GenerationWorkerError,
    GenerationWorkerPool,
    shard_by_group,
)
from agentic_rl.trainer.learning.scoring import pack, score  # noqa: E402
from agentic_rl.types import StopReason  # noqa: E402

SEEDS = [1, 1, 2, 2, 3, 3, 4, 4]  # 4 groups of 2
GROUPS = [f"g{s}" for s in SEEDS]
CONFIG = RolloutConfig(max_turns=2, max_new_tokens=8, temperature=0.7)
#: fp32 sampler (FastPolicy) vs the trainer's scoring forward, same weights: float error only
LOGPROB_ATOL = 1e-4


@pytest.fixture(scope="module")
def ray_up():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _pool(tiny_model_dir, tokenizer, n=2, **kwargs):
    return GenerationWorkerPool(
        n,
        partial(load_model, tiny_model_dir),
        tokenizer,
        ModelConfig(max_batch=8, num_threads=1),
        cpus_per_worker=0.5,
        timeout_s=kwargs.pop("timeout_s", 120),
        **kwargs,
    )


def _max_diff(model, trajectories) -> float:
    """Largest |recorded logprob - ``model``'s logprob| over the sampled tokens."""
    batch = pack(trajectories)
    with torch.no_grad():
        logprobs, _ = score(model, batch, temperature=CONFIG.temperature)
    return float((logprobs - batch.old_logprobs).abs().max())


def _gone(pid: int, wait_s: float = 60.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_shard_by_group_keeps_groups_whole():
    assert shard_by_group(["a", "a", "b", "b", "c", "c"], 2) == [range(0, 4), range(4, 6)]
    assert shard_by_group(["a", "a", "b", "b"], 2) == [range(0, 2), range(2, 4)]
    assert shard_by_group(["a", "a", "a"], 2) == [range(0, 3)]  # one group: one shard
    assert shard_by_group(["a", "b", "c"], 5) == [range(0, 1), range(1, 2), range(2, 3)]
    assert shard_by_group([], 2) == []
    with pytest.raises(ValueError, match="parts"):
        shard_by_group(["a"], 0)
    with pytest.raises(ValueError, match="num_workers"):
        GenerationWorkerPool(0, load_model, None, ModelConfig())


def test_workers_sample_with_the_synced_weights_and_stamp_their_version(
    ray_up, tiny_model_dir, tokenizer
):
    model = load_model(tiny_model_dir)
    pool = _pool(tiny_model_dir, tokenizer)
    try:
        with pytest.raises(GenerationWorkerError, match="no weights"):
            pool.rollout("calculator-v0", {}, SEEDS, GROUPS, CONFIG, sample_seed=7)
        assert pool.sync(model.state_dict(), 0) > 0
        first = pool.rollout("calculator-v0", {}, SEEDS, GROUPS, CONFIG, sample_seed=7)
        assert [(t.seed, t.group_id) for t in first] == list(zip(SEEDS, GROUPS))  # order kept
        assert all(t.failure is None and t.policy_version == 0 for t in first)
        pids = {t.info["generation_worker_pid"] for t in first}
        assert len(pids) == 2 and os.getpid() not in pids  # sampled in both actors
        for gid in set(GROUPS):  # a group never spans workers
            assert len({t.info["generation_worker"] for t in first if t.group_id == gid}) == 1
        assert _max_diff(model, first) < LOGPROB_ATOL  # the actors hold the trainer's weights

        old = {n: t.clone() for n, t in model.state_dict().items()}
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        # only the parameters: what a sync after the first one sends
        assert pool.sync({n: p.detach() for n, p in model.named_parameters()}, 1) > 0
        second = pool.rollout("calculator-v0", {}, SEEDS, GROUPS, CONFIG, sample_seed=8)
        assert all(t.failure is None and t.policy_version == 1 for t in second)
        new_diff = _max_diff(model, second)
        before = load_model(tiny_model_dir)
        before.load_state_dict(old)
        old_diff = _max_diff(before, second)
        print(
            f"\nmax |logprob diff| to the synced weights {new_diff:.2e}, to the old {old_diff:.2e}"
        )
        assert new_diff < LOGPROB_ATOL < 20 * LOGPROB_ATOL < old_diff  # the sync really happened
    finally:
        pool.shutdown()
    assert all(_gone(pid) for pid in pids)  # no actor process left


def test_a_killed_worker_fails_its_episodes_and_the_others_carry_on(
    ray_up, tiny_model_dir, tokenizer
):
    model = load_model(tiny_model_dir)
    pool = _pool(tiny_model_dir, tokenizer)
    try:
        pool.sync(model.state_dict(), 0)
        ray.kill(pool.actors[0])
        got = pool.rollout("calculator-v0", {}, SEEDS, GROUPS, CONFIG, sample_seed=7)
        assert len(got) == len(SEEDS)
        dead = [t for t in got if t.failure is not None]
        assert [t.seed for t in dead] == SEEDS[:4]  # worker 0's shard: the first two groups
        for t in dead:
            assert t.stop_reason == StopReason.ERROR and t.token_ids == ()
            assert "generation worker 0: died" in t.failure and "ActorDied" in t.failure
        assert all(t.stop_reason != StopReason.ERROR for t in got[4:])
        assert pool.alive == {1}
        # later rounds and syncs go to the live worker only
        assert pool.sync(model.state_dict(), 1) > 0
        again = pool.rollout("calculator-v0", {}, SEEDS, GROUPS, CONFIG, sample_seed=9)
        assert all(t.failure is None and t.policy_version == 1 for t in again)
        assert {t.info["generation_worker"] for t in again} == {1}
        ray.kill(pool.actors[1])
        last = pool.rollout("calculator-v0", {}, SEEDS, GROUPS, CONFIG, sample_seed=10)
        assert all("generation worker 1: died" in t.failure for t in last)
        with pytest.raises(GenerationWorkerError, match="no generation worker is alive"):
            pool.rollout("calculator-v0", {}, SEEDS, GROUPS, CONFIG)
        with pytest.raises(GenerationWorkerError, match="no generation worker is alive"):
            pool.sync(model.state_dict(), 2)
    finally:
        pool.shutdown()


def test_a_worker_that_cannot_start_is_a_clear_error(ray_up, tokenizer, tmp_path):
    with pytest.raises(GenerationWorkerError, match="failed to start.*ModelNotFoundError"):
        _pool(tmp_path / "no-model", tokenizer, n=1)
