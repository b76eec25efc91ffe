"""Environment mixtures (agentic_rl.trainer.sampling.mixture): the task draws, demonstration shares and
per-env reward scaling worked out by hand, and a 2-step mixture run on the tiny model whose
groups are single-env, whose metrics, evaluation, summary and report are per env and whose
records replay."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from agentic_rl.config import load_config
from agentic_rl.trainer.evaluation.held_out import is_success
from agentic_rl.trainer.sampling.mixture import (
    EnvSlot,
    MixTask,
    MixturePool,
    RewardNorm,
    demo_shares,
    env_slots,
)
from agentic_rl.trainer.sampling.task_pool import TaskPool
from agentic_rl.types import Action, StopReason, Trajectory, Turn
from tests.recipe_settings import TWO_STEP_SMOKE


@pytest.mark.parametrize(
    "total, weights, shares",
    [
        (48, [1, 1, 1], [16, 16, 16]),
        (10, [1, 1, 1], [4, 3, 3]),  # 3.33 each: the one left over goes to the first (a tie)
        (7, [1, 2, 4], [1, 2, 4]),
        (5, [1, 3], [1, 4]),  # 1.25 and 3.75: floors 1 + 3, the rest to the larger remainder
        (2, [1, 1, 1], [1, 1, 0]),
    ],
)
def test_demo_shares_by_largest_remainder(total, weights, shares):
    assert demo_shares(total, weights) == shares


def test_slots_resolve_weights_shares_sizes_and_budgets():
    config = load_config(
        None,
        [
            "env.mix=[{id='calculator-v0', weight=1.0}, {id='search-qa-v0', weight=3.0, eval_size=7}]",
            "warmup.num_demos=10",
            "eval.size=5",
        ],
    )
    calc, sq = env_slots(config)
    assert (calc.weight, sq.weight) == (0.25, 0.75)
    assert (calc.warmup_demos, sq.warmup_demos) == (3, 7)  # 2.5 / 7.5: tie to the first
    assert (calc.eval_size, sq.eval_size) == (5, 7)
    assert calc.rollout == config.rollout
    assert (sq.rollout.max_turns, sq.rollout.max_new_tokens) == (4, 96)
    assert sq.rollout.temperature == config.rollout.temperature
    assert env_slots(load_config(None, [])) == []


def _slots(*weights: float) -> list[EnvSlot]:
    total = sum(weights)
    return [
        EnvSlot(i, f"env{i}-v0", w / total, {}, {}, 0, 1, None)  # type: ignore[arg-type]
        for i, w in enumerate(weights)
    ]


def _pool(weights, seed=0, sampling="uniform", norm=None) -> MixturePool:
    return MixturePool(_slots(*weights), seed, 100, sampling, lambda slot, s: "", norm)


def test_each_draw_gives_every_env_its_share_rounded_down_or_up():
    pool = _pool([1, 1, 1])
    for _ in range(20):  # n = 6, w = 1/3: exactly 2 tasks of each env, in a shuffled order
        tasks = pool.draw(6)
        assert Counter(t.slot for t in tasks) == {0: 2, 1: 2, 2: 2}
    orders = {tuple(t.slot for t in pool.draw(6)) for _ in range(20)}
    assert len(orders) > 1  # the envs are interleaved, not blocked
    pool = _pool([2, 1, 1])
    counts = Counter()
    for _ in range(400):  # n = 3: n·w = 1.5, 0.75, 0.75
        c = Counter(t.slot for t in pool.draw(3))
        assert c[0] in (1, 2) and c[1] in (0, 1) and c[2] in (0, 1)
        counts.update(c)
    # marginally each task's env follows the weights: 600 / 300 / 300 expected of 1,200 (env 0
    # gets 1 or 2 tasks with probability 1/2 each: sd 10; envs 1 and 2 sd about 11)
    assert abs(counts[0] - 600) < 50
    assert abs(counts[1] - 300) < 55 and abs(counts[2] - 300) < 55


def test_draws_are_seeded_distinct_and_resume_from_the_state():
    a, b, c = _pool([1, 1], seed=3), _pool([1, 1], seed=3), _pool([1, 1], seed=4)
    first = a.draw(8)
    assert first == b.draw(8) and first != c.draw(8)
    again = a.draw(8, exclude=first)
    assert not set(again) & set(first) and len(set(again)) == 8
    state = json.loads(json.dumps(a.state()))  # a checkpoint's JSON
    d = _pool([1, 1], seed=3)
    d.load_state(state)
    assert d.draw(8) == a.draw(8)


def test_each_env_proposes_the_seeds_a_single_env_pool_of_the_run_seed_would():
    pool = _pool([1, 1], seed=5)
    tasks = [t for _ in range(5) for t in pool.draw(4)]
    single = TaskPool(seed=5, seed_start=100, difficulty=False, level_of=lambda s: "")
    assert [t.seed for t in tasks if t.slot == 1] == single.draw(10)


def test_sequential_sampling_gives_each_env_its_next_seeds():
    pool = _pool([1, 1], sampling="sequential")
    tasks = pool.draw(4) + pool.draw(4)
    for slot in (0, 1):
        assert [t.seed for t in tasks if t.slot == slot] == [100, 101, 102, 103]
    assert MixTask(0, 100) in tasks


def _scored(env: str, reward: float, turn_rewards=(0.0,), failed=False) -> Trajectory:
    turns = tuple(
        Turn(i, Action("a"), None, r, (), (1,), (1,), (0.0,)) for i, r in enumerate(turn_rewards)
    )
    return Trajectory(
        env,
        0,
        "g",
        f"{env}-{reward}",
        (),
        turns,
        (1,) * len(turns),
        (1,) * len(turns),
        (0.0,) * len(turns),
        StopReason.TERMINATED,
        reward=None if failed else reward,
        reward_components={} if failed else {"outcome": reward},
        failure="boom" if failed else None,
    )


def test_reward_norm_by_hand():
    norm = RewardNorm(decay=0.5, eps=0.1)
    # env a: R = 0, 1, 1, 0 -> n = 4, ΣR = 2, ΣR² = 2: mean 0.5, var 0.5 − 0.25, σ = 0.5
    norm.update([_scored("a", r) for r in (0.0, 1.0, 1.0, 0.0)] + [_scored("a", 9, failed=True)])
    assert norm.std("a") == pytest.approx(0.5)
    assert norm.std("b") == 0.0  # no rollout yet
    # decayed to n = 2, ΣR = 1, ΣR² = 1, then + (1, 1): n = 4, ΣR = 3, ΣR² = 3
    # mean 0.75, var 0.75 − 0.5625 = 0.1875
    norm.update([_scored("a", 1.0), _scored("a", 1.0)])
    assert norm.std("a") == pytest.approx(math.sqrt(0.1875))
    # R = 1.2 over turns 0.2 then the rest: scaled by 1 / (σ + 0.1), the turns alike
    t = _scored("a", 1.2, turn_rewards=(0.2, 1.0))
    (s,) = norm.scale([t])
    c = 1.0 / (math.sqrt(0.1875) + 0.1)
    assert s.reward == pytest.approx(1.2 * c)
    assert [x.reward for x in s.turns] == pytest.approx([0.2 * c, 1.0 * c])
    assert t.reward == 1.2 and s.reward_components == t.reward_components  # only credit's copy
    (b,) = norm.scale([_scored("b", 1.0)])
    assert b.reward == pytest.approx(10.0)  # σ_b = 0: 1 / ε


def test_pool_update_feeds_each_envs_task_pool_and_the_moments():
    pool = _pool([1, 1], norm=RewardNorm(1.0, 0.1))
    trajs = [_scored("env0-v0", 1.0), _scored("env0-v0", 0.0), _scored("env1-v0", 1.0)]
    pool.update(trajs, is_success)
    assert pool.pools[0].counts[""] == [1.0, 2.0] and pool.pools[1].counts[""] == [1.0, 1.0]
    assert pool.counts == {"env0-v0/": [1.0, 2.0], "env1-v0/": [1.0, 1.0]}
    assert pool.norm.std("env0-v0") == pytest.approx(0.5) and pool.norm.std("env1-v0") == 0.0
    restored = _pool([1, 1], norm=RewardNorm(1.0, 0.1))
    restored.load_state(json.loads(json.dumps(pool.state())))
    assert restored.norm.moments == pool.norm.moments and restored.counts == pool.counts


# --- a 2-step mixture run on the tiny model ---------------------------------------------------

MIX_ENVS = ("calculator-v0", "search-qa-v0")


@pytest.fixture(scope="module")
def mixture_run(tiny_model_dir, tmp_path_factory):
    """Two RL steps of 4 groups of 2 over calculator-v0 and search-qa-v0 (weights 1:1), each
    env with 2 demonstrations and 2 held-out tasks; guidance, difficulty sampling and per-env
    reward scaling on."""
    from agentic_rl.trainer.recipe import train

    out = tmp_path_factory.mktemp("mixture") / "runs"
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"output_dir='{out}'",
            *TWO_STEP_SMOKE,
            "env.mix=[{id='calculator-v0'}, {id='search-qa-v0'}]",
            "warmup.num_demos=4",
            "algorithm.tasks_per_step=4",
            "sampling.guidance='oracle'",
            "sampling.task_sampling='difficulty'",
            "env.reward_norm='std'",
            "optim.skip_zero_advantage=false",
        ],
    )
    return config, train(config)


def test_mixture_groups_are_single_env_and_every_env_trains(mixture_run):
    from agentic_rl.trajectories import TrajectoryStore

    _, run_dir = mixture_run
    records = list(TrajectoryStore(run_dir / "trajectories").read(phase="rl"))
    envs_of_group: dict[str, set[str]] = {}
    for r in records:
        envs_of_group.setdefault(r["group_id"], set()).add(r["env_id"])
    assert len(envs_of_group) == 2 * 4 and all(len(e) == 1 for e in envs_of_group.values())
    per_step = Counter((r["rl_step"], r["env_id"]) for r in records)
    # 4 tasks of weight 1/2 each: exactly 2 groups of 2 of each env per step
    assert per_step == {(s, e): 4 for s in (1, 2) for e in MIX_ENVS}
    kwargs = {r["env_id"]: r["env_kwargs"] for r in records}
    assert "question_kinds" not in kwargs["search-qa-v0"] and kwargs["calculator-v0"] == {}
    demos = Counter(
        r["env_id"] for r in TrajectoryStore(run_dir / "trajectories").read(phase="warmup")
    )
    assert demos == {"calculator-v0": 2, "search-qa-v0": 2}
    calc_demo = next(
        r
        for r in TrajectoryStore(run_dir / "trajectories").read(phase="warmup")
        if r["env_id"] == "calculator-v0"
    )
    assert calc_demo["env_kwargs"] == {"levels": ["direct"]}  # its warm-up level, for replay
    assert {t["info"].get("level") for t in [calc_demo]} == {"direct"}


def test_mixture_metrics_eval_and_summary_are_per_env(mixture_run):
    from agentic_rl.trainer.records.run_dir import MetricsLog

    _, run_dir = mixture_run
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert 0.0 <= r["rollout/success"] <= 1.0
        for env in MIX_ENVS:
            assert 0.0 <= r[f"rollout/{env}/success"] <= 1.0
            # the policy's own rollouts: 2 groups of 2, less one per oracle-guided group
            assert r[f"rollout/{env}/episodes"] in (2.0, 3.0, 4.0)
            assert r[f"rollout/{env}/groups_trained"] == 2
            assert f"rollout/{env}/reward_total" in r and f"reward_norm/{env}/std" in r
        own = sum(r[f"rollout/{env}/episodes"] for env in MIX_ENVS)
        assert own == 8 - r["rollout/groups_guided"]
        # levels are per env: calculator's under its key, never pooled
        assert not any(k.startswith("rollout/success/") for k in r)
        assert any(k.startswith("rollout/calculator-v0/success/") for k in r)
        assert any(k.startswith("pool/accept/calculator-v0/") for k in r)
    evals = [r for r in rows if r["phase"] == "eval"]
    assert [r["tag"] for r in evals] == ["warmup", "final"]
    for r in evals:
        assert r["eval/calculator-v0/episodes"] == r["eval/search-qa-v0/episodes"] == 2.0
        pooled = (r["eval/calculator-v0/success"] + r["eval/search-qa-v0/success"]) / 2
        assert r["eval/success"] == pytest.approx(pooled)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["envs"]) == set(MIX_ENVS)
    assert set(summary["envs"]["search-qa-v0"]["success"]) == {"warmup", "final"}
    assert set(summary["envs"]["calculator-v0"]["success_by_level"]["final"]) <= {
        "direct",
        "multi_op",
        "word",
    }
    report = (run_dir / "report.html").read_text()
    for env in MIX_ENVS:
        assert f"Held-out evaluation: {env}" in report and f"Rollouts: {env}" in report


def test_mixture_eval_records_count_per_env_in_the_report_data(mixture_run):
    from agentic_rl.trainer.records.report_data import eval_counts, eval_outcomes

    _, run_dir = mixture_run
    for env in MIX_ENVS:
        outcomes = eval_outcomes(run_dir, env_id=env)
        assert set(outcomes) == {"warmup", "final"}
        assert sorted(outcomes["final"]) == [1_000_000, 1_000_001]
    counts = eval_counts(run_dir)["final"]
    assert counts["eval/calculator-v0/success"][1] == counts["eval/search-qa-v0/success"][1] == 2
    assert counts["eval/success"][1] == 4  # the same seeds of two envs are two tasks


def test_mixture_records_replay_without_divergence(mixture_run, capsys):
    from agentic_rl.cli import main
    from agentic_rl.trajectories import TrajectoryStore

    _, run_dir = mixture_run
    records = list(TrajectoryStore(run_dir / "trajectories").read())
    assert {r["env_id"] for r in records} == set(MIX_ENVS)
    for record in records:
        args = ["replay", str(run_dir), "--trajectory", record["trajectory_id"], "--json"]
        assert main(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["first_divergent_turn"] is None and out["turns_replayed"] == len(record["turns"])


def test_the_checkpoint_holds_the_mixture_pool(mixture_run):
    """The mixture pool's draws, per-env pools and reward moments are in the checkpoint, where
    the recipe's resume reads them back (``Run.task_pool.load_state``)."""
    from agentic_rl.trainer.records.checkpoint import latest_checkpoint, load_trainer_state

    _, run_dir = mixture_run
    state = load_trainer_state(latest_checkpoint(run_dir) / "trainer_state.pt")
    pool = state["extra"]["task_pool"]
    assert pool["draws"] == 2 and set(pool["pools"]) == set(MIX_ENVS)
    assert set(pool["reward_moments"]) == set(MIX_ENVS)
    assert all(n > 0 for n, _s, _q in pool["reward_moments"].values())


def test_mixture_vs_single_analysis_runs(mixture_run, tmp_path):
    """benchmarks/mixture_vs_single.py end to end on the tiny run (given as every env's single
    run too: each difference is then 0)."""
    import subprocess
    import sys
    from pathlib import Path

    _, run_dir = mixture_run
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "mixture_vs_single.py"
    singles = [f"{env}={run_dir}" for env in MIX_ENVS]
    args = ["--mixture", str(run_dir), "--single", *singles, "--resamples", "100"]
    out = subprocess.run(
        [sys.executable, str(script), *args, "--out", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "| calculator-v0 | mixture (n=2) | 2 | 4 |" in out.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    for env in MIX_ENVS:
        row = result["envs"][env]
        assert row["mixture"]["budget"] == {**row["mixture"]["budget"], "demos": 2, "rl_steps": 2}
        assert row["mixture_minus_single_final"]["estimate"] == 0.0
        assert row["mixture_minus_single_lift"]["estimate"] == 0.0
