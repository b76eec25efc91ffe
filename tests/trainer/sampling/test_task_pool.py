"""Task pool weights and DAPO dynamic sampling with refill, worked out by hand."""

from __future__ import annotations

import pytest

from agentic_rl.trainer.evaluation.held_out import is_success
from agentic_rl.trainer.sampling.task_pool import TaskPool, informative_groups, sample_with_refill
from agentic_rl.types import StopReason, Trajectory


def _traj(gid: str, outcome: float, level: str = "a", failed: bool = False) -> Trajectory:
    info = {"level": level}
    comps = {} if failed else {"outcome": outcome, "cost": 0.01 * len(gid)}
    return Trajectory(
        "x-v0",
        0,
        gid,
        f"{gid}-{outcome}",
        (),
        (),
        (1,),
        (1,),
        (0.0,),
        StopReason.TERMINATED,
        reward=None if failed else outcome,
        reward_components=comps,
        info=info,
        failure="boom" if failed else None,
    )


def _group(gid: str, outcomes, level: str = "a") -> list[Trajectory]:
    return [_traj(gid, o, level) for o in outcomes]


def test_weight_by_hand():
    pool = TaskPool(
        seed=0, seed_start=0, difficulty=True, level_of=lambda s: "a", decay=1.0, floor=0.05
    )
    # no data: p = (0 + 1) / (0 + 2) = 0.5 -> 0.25 + 0.05
    assert pool.weight("a") == pytest.approx(0.30)
    # 8 of 8 solved: p = 9/10 -> 0.9 * 0.1 + 0.05 = 0.14
    pool.update(_group("g", [1.0] * 8), is_success)
    assert pool.weight("a") == pytest.approx(0.14)
    # a level solved 4 of 8: p = 5/10 -> 0.30; acceptance of "a" = 0.14 / 0.30
    pool.update(_group("h", [1.0] * 4 + [0.0] * 4, level="b"), is_success)
    assert pool.weight("b") == pytest.approx(0.30)
    assert pool.acceptance("a") == pytest.approx(0.14 / 0.30)
    assert pool.acceptance("b") == pytest.approx(1.0)


def test_decay_by_hand():
    pool = TaskPool(seed=0, seed_start=0, difficulty=True, level_of=lambda s: "a", decay=0.5)
    pool.update(_group("g", [1.0, 1.0]), is_success)  # counts [2, 2]
    pool.update(_group("h", [0.0, 0.0]), is_success)  # decayed to [1, 1], then [1, 3]
    assert pool.counts["a"] == [1.0, 3.0]
    # p = (1 + 1) / (3 + 2) = 0.4 -> 0.24 + 0.05
    assert pool.weight("a") == pytest.approx(0.29)


def test_failed_rollouts_count_as_unsolved():
    pool = TaskPool(seed=0, seed_start=0, difficulty=True, level_of=lambda s: "a", decay=1.0)
    pool.update([_traj("g", 1.0), _traj("g", 1.0, failed=True)], is_success)
    assert pool.counts["a"] == [1.0, 2.0]


def test_draws_follow_the_weights():
    """Two levels by seed parity; one is always solved: it is drawn at the ratio of the weights."""
    pool = TaskPool(
        seed=3,
        seed_start=0,
        difficulty=True,
        level_of=lambda s: "easy" if s % 2 else "hard",
        decay=1.0,
        floor=0.05,
    )
    pool.update(
        _group("e", [1.0] * 98, level="easy") + _group("h", [1.0] * 49 + [0.0] * 49, level="hard"),
        is_success,
    )
    # easy: p = 99/100 -> 0.0099 + 0.05 = 0.0599; hard: p = 0.5 -> 0.30; acceptance 0.1997 vs 1
    seeds = pool.draw(3000)
    easy = sum(s % 2 for s in seeds) / len(seeds)
    expected = 0.0599 / (0.0599 + 0.30)  # share of accepted candidates that are easy = 0.166
    assert abs(easy - expected) < 0.03
    assert len(set(seeds)) == len(seeds)


def test_stream_depends_on_seed_and_is_resumable():
    def pool(seed):
        return TaskPool(seed=seed, seed_start=100, difficulty=False, level_of=lambda s: "a")

    a, b = pool(0), pool(1)
    first = a.draw(5)
    assert first != b.draw(5)
    assert all(100 <= s < 100 + a.span for s in first)
    resumed = pool(0)
    resumed.load_state(a.state())
    assert resumed.draw(4) == a.draw(4)


def test_uniform_pool_never_probes_levels():
    def boom(seed):
        raise AssertionError("level_of called")

    assert len(TaskPool(seed=0, seed_start=0, difficulty=False, level_of=boom).draw(3)) == 3


def test_bad_pool_arguments():
    with pytest.raises(ValueError, match="decay"):
        TaskPool(seed=0, seed_start=0, difficulty=True, level_of=str, decay=0.0)
    with pytest.raises(ValueError, match="n must be"):
        TaskPool(seed=0, seed_start=0, difficulty=True, level_of=str).draw(-1)


def test_informative_groups_reads_the_outcome_only():
    trajs = (
        _group("same", [1.0, 1.0])
        + _group("mixed", [1.0, 0.0])
        + _group("zero", [0.0, 0.0])
        + [_traj("lonely", 1.0), _traj("lonely", 0.0, failed=True)]
    )
    # cost terms differ between groups but not within one; "lonely" has one scored rollout
    assert informative_groups(trajs) == ["mixed"]


def _rounds(plan):
    """rollout(round) returning the groups of ``plan[round]`` (lists of outcomes)."""
    calls = []

    def rollout(r):
        calls.append(r)
        return [t for k, outcomes in enumerate(plan[r]) for t in _group(f"r{r}g{k}", outcomes)]

    return rollout, calls


def test_refill_until_the_batch_is_full():
    rollout, calls = _rounds(
        [
            [[1, 1], [1, 0], [0, 0]],  # 1 informative
            [[0, 0], [0, 1], [1, 0]],  # 2 informative: the batch of 2 fills with the first of them
            [[1, 0]],
        ]
    )
    batch = sample_with_refill(rollout, groups_needed=2, max_rounds=3, dynamic=True)
    assert calls == [0, 1]
    assert [t.group_id for t in batch.train] == ["r0g1", "r0g1", "r1g1", "r1g1"]
    assert batch.rounds == 2 and batch.groups_sampled == 6 and batch.groups_informative == 3
    assert len(batch.dropped) == 8 and len(batch.all) == 12


def test_refill_stops_at_the_cap_and_counts():
    rollout, calls = _rounds([[[1, 1], [0, 1]], [[0, 0], [0, 0]], [[1, 1]]])
    batch = sample_with_refill(rollout, groups_needed=3, max_rounds=2, dynamic=True)
    assert calls == [0, 1]
    assert {t.group_id for t in batch.train} == {"r0g1"}
    assert batch.rounds == 2 and batch.groups_sampled == 4 and batch.groups_informative == 1


def test_without_dynamic_sampling_one_round_keeps_everything():
    rollout, calls = _rounds([[[1, 1], [1, 0]], [[1, 0]]])
    batch = sample_with_refill(rollout, groups_needed=5, max_rounds=3, dynamic=False)
    assert calls == [0]
    assert len(batch.train) == 4 and not batch.dropped
    assert batch.groups_sampled == 2 and batch.groups_informative == 1


def test_refill_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_rounds"):
        sample_with_refill(lambda r: [], groups_needed=1, max_rounds=0, dynamic=True)
